package jobqueue

import (
	"errors"
)

// Errors of the queue. Bad input matches lifecycle.ErrInvalidJob, an id in
// use lifecycle.ErrJobExists, a write after the worker's lease on the job
// lapsed or was taken over lifecycle.ErrLeaseLost; refusals of the authority
// matrix match lifecycle.ErrForbiddenActor.
var (
	// ErrInvalidConfig: a Config that New refuses.
	ErrInvalidConfig = errors.New("jobqueue: invalid config")
	// errStepTimeout is the cause of a step's context when StepTimeout runs out.
	errStepTimeout = errors.New("jobqueue: step timeout")
	// errNotFinalized: the stored artifact's finalized flag is false (one
	// not written by the artifact store): it must not back a COMPLETE job.
	errNotFinalized = errors.New("artifact: not finalized")
)
