package lifecycle

import (
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// ErrorCode returns the code of err: that of a *RunError in its chain, else
// that of the first error with a Code method (the run package's
// ErrNotFound is RUN_NOT_FOUND), else NOT_FOUND for storage.ErrNotFound and
// INVALID_INPUT for storage.ErrInvalidID (an id a caller passed), else
// INTERNAL_ERROR (nil has no code).
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var re *RunError
	if errors.As(err, &re) {
		return re.Code
	}
	var c interface{ Code() string }
	if errors.As(err, &c) {
		return c.Code()
	}
	// Sentinels without a Code method.
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, storage.ErrInvalidID):
		return codes.InvalidInput
	case errors.Is(err, records.ErrLeaseLost):
		return codes.LeaseLost
	case errors.Is(err, storage.ErrUnavailable):
		return codes.UpstreamUnavailable
	case errors.Is(err, records.ErrCorrupt):
		return codes.RecordQuarantined
	}
	return codes.InternalError
}

// RunError is an error with a code of the code table (docs/spec.md#error-codes). A step returns one (or wraps one)
// to say why it failed, e.g. NLM_UNAVAILABLE; the run's error field then
// reads "CODE: message". Retryable says whether another attempt may help.
type RunError struct {
	Code    string
	Message string
	// Permanent stops retries: the step fails at once.
	Permanent bool
	// Err is the cause, if any.
	Err error
}

// NewRunError returns a retryable *RunError.
func NewRunError(code, format string, args ...any) *RunError {
	return &RunError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error is "CODE: message", the form of status.json's error field.
func (e *RunError) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the cause.
func (e *RunError) Unwrap() error { return e.Err }
