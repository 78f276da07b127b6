package jobqueue

import (
	"errors"

	"github.com/runconveyor/conveyor/lifecycle"
)

// Errors of the queue. Bad input matches ErrInvalidJob; refusals of the
// authority matrix match lifecycle.ErrForbiddenActor.
var (
	// ErrInvalidConfig: a Config that New refuses.
	ErrInvalidConfig = errors.New("jobqueue: invalid config")
	// ErrInvalidJob: a NewJob that breaks a rule of Enqueue.
	ErrInvalidJob = errors.New("jobqueue: invalid job")
	// ErrJobExists: Enqueue with the id of a job that already exists.
	ErrJobExists = lifecycle.ErrJobExists
	// ErrLeaseLost: the worker's lease on the job lapsed or was taken over;
	// it may no longer write the job. It is lifecycle.ErrLeaseLost, the one
	// sentinel of the SDK.
	ErrLeaseLost = lifecycle.ErrLeaseLost
	// ErrStepTimeout is the cause of a step's context when StepTimeout runs out.
	ErrStepTimeout = errors.New("jobqueue: step timeout")
)
