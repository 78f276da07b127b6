package lifecycle

import "errors"

// The engines' sentinels that an API answer stands for. They live here so
// the Go client's Error can match them without the engine; the engines
// answer these values (some also under their own names, as run.ErrNotFound
// is ErrRunNotFound), so errors.Is works with either name.
var (
	// ErrRunNotFound: no run has the id asked for (RUN_NOT_FOUND, 404).
	ErrRunNotFound error = &codedSentinel{"run: run not found", codeRunNotFound}
	// ErrRunUnsupported: the run's machine has no such operation
	// (RUN_UNSUPPORTED_OPERATION).
	ErrRunUnsupported error = &codedSentinel{"run: operation not supported by the run's machine", codeUnsupported}
	// ErrIdempotencyConflict: the key was used with another request.
	ErrIdempotencyConflict = errors.New("run: idempotency key used with a different request")
	// ErrIdempotencyExpired: the key's record outlived its TTL.
	ErrIdempotencyExpired = errors.New("run: idempotency record expired")
	// ErrIdempotencyInProgress: the key's run is still being created
	// (IDEMPOTENCY_IN_PROGRESS); retry it. run.IdempotencyInProgressError
	// matches it.
	ErrIdempotencyInProgress error = &codedSentinel{"run: idempotency key still in progress", codeIdempotencyInProgress}
	// ErrJobExists: a job has the id already (JOB_EXISTS): the job queue's
	// Enqueue answers it.
	ErrJobExists = errors.New("jobqueue: job already exists")
	// ErrJobFinished: the job asked to cancel has finished (COMPLETE,
	// DEAD, FAILED on its way to DEAD, or CANCELLED): JOB_FINISHED, 409.
	ErrJobFinished error = &codedSentinel{"jobqueue: job already finished", codeJobFinished}
	// ErrJobNotCancellable: the job asked to cancel runs on a machine
	// without cancel, the spec's (the NLM job types): JOB_NOT_CANCELLABLE, 409.
	ErrJobNotCancellable error = &codedSentinel{"jobqueue: job type cannot be cancelled", codeJobNotCancellable}
	// ErrInboxEntryExists: an inbox entry has the id already
	// (INBOX_ENTRY_EXISTS): the inbox's Submit answers it.
	ErrInboxEntryExists error = &codedSentinel{"inbox: entry already exists", codeInboxEntryExists}
)

// codedSentinel is a sentinel with a code of its own, which ErrorCode finds
// before any code further down the chain.
type codedSentinel struct{ msg, code string }

func (e *codedSentinel) Error() string { return e.msg }
func (e *codedSentinel) Code() string  { return e.code }
