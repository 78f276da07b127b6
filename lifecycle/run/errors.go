package run

import (
	"errors"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Triggers of a run (docs/spec.md#run-status), as SubmitRequest.Trigger
// names them.
const (
	triggerManual = "manual"
	triggerCron   = "cron"
	triggerEvent  = "event"
)

// maxIdempotencyKeyBytes bounds an idempotency key (docs/spec.md#limits;
// the schemes' own parts are short); a longer key is refused with
// INPUT_TOO_LARGE.
const maxIdempotencyKeyBytes = 512

// Sentinel errors of the run package. Match them with errors.Is; the
// errors of a run's operations match the sentinels of package lifecycle
// (lifecycle.ErrRunNotFound, lifecycle.ErrIdempotencyConflict...), and
// lifecycle.ErrorCode gives each its code.
var (
	// ErrInvalidConfig is matched by errors from NewRunner about its arguments.
	ErrInvalidConfig = errors.New("run: invalid runner config")
	// errRunnerStarted is returned by a second call of Runner.Run.
	errRunnerStarted = errors.New("run: runner already running")
	// errInvalidIdempotencyKey: the key follows none of the schemes (it
	// reaches callers as a *RequestError's reason).
	errInvalidIdempotencyKey = errors.New("run: invalid idempotency key")
)

// RequestError is a request the Runner refuses as malformed; it carries the
// code INVALID_REQUEST (an HTTP 400).
type RequestError struct {
	Field  string
	Reason string
}

// Error names the field and why it was refused.
func (e *RequestError) Error() string { return "run: invalid " + e.Field + ": " + e.Reason }

// Code is INVALID_REQUEST.
func (e *RequestError) Code() string { return codes.InvalidRequest }

// unsupportedError names the machine and the operation it lacks; it
// matches ErrUnsupported.
type unsupportedError struct {
	Machine   string
	Operation string
}

// Error names the machine and the missing operation.
func (e *unsupportedError) Error() string {
	return fmt.Sprintf("run: machine %s does not support %s", e.Machine, e.Operation)
}

// Is matches ErrUnsupported.
func (e *unsupportedError) Is(target error) bool { return target == lifecycle.ErrRunUnsupported }

// Code is RUN_UNSUPPORTED_OPERATION.
func (e *unsupportedError) Code() string { return codes.Unsupported }

// IdempotencyFailedError answers a key whose request failed and used up
// its attempts (Config.IdempotencyMaxAttempts), until its record expires:
// the stored error, with its stored code.
type IdempotencyFailedError struct {
	Key string
	// ErrorCode and Message are the failure as recorded.
	ErrorCode, Message string
	Attempts           int
}

// Error names the key and the stored error.
func (e *IdempotencyFailedError) Error() string {
	return fmt.Sprintf("run: idempotency key %s failed after %d attempts: %s", e.Key, e.Attempts, e.Message)
}

// Code is the stored error's code (INTERNAL_ERROR for a record that kept
// none).
func (e *IdempotencyFailedError) Code() string {
	if e.ErrorCode != "" {
		return e.ErrorCode
	}
	return codes.InternalError
}

// IdempotencyInProgressError answers a duplicate whose run is not written
// yet and could not be written by this submit either (the store failed):
// the key is still being processed; the caller retries (after
// RetryAfter). It carries no run id, since none exists yet. It matches
// lifecycle.ErrIdempotencyInProgress; its code is IDEMPOTENCY_IN_PROGRESS.
type IdempotencyInProgressError struct {
	Key string
	Err error
}

// Error names the key and why its run could not be written.
func (e *IdempotencyInProgressError) Error() string {
	return fmt.Sprintf("run: idempotency key %s: its run is still being created (%v)", e.Key, e.Err)
}

// Is matches lifecycle.ErrIdempotencyInProgress.
func (e *IdempotencyInProgressError) Is(target error) bool {
	return target == lifecycle.ErrIdempotencyInProgress
}

// Unwrap returns the store's error.
func (e *IdempotencyInProgressError) Unwrap() error { return e.Err }

// Code is IDEMPOTENCY_IN_PROGRESS.
func (e *IdempotencyInProgressError) Code() string { return codes.IdempotencyInProgress }

// RetryAfter is when a retry may find the run written.
func (e *IdempotencyInProgressError) RetryAfter() time.Duration { return time.Second }
