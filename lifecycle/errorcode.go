package lifecycle

import "errors"

// The codes of this package's own errors. The code table (with the HTTP
// status of each code) names them too; a test of the table holds the two
// spellings together.
const (
	codeInternalError         = "INTERNAL_ERROR"
	codeUpstreamUnavailable   = "UPSTREAM_UNAVAILABLE"
	codeInvalidTransition     = "RUN_INVALID_TRANSITION"
	codeTerminalState         = "RUN_TERMINAL_STATE"
	codeForbidden             = "FORBIDDEN"
	codeRunNotFound           = "RUN_NOT_FOUND"
	codeUnsupported           = "RUN_UNSUPPORTED_OPERATION"
	codeIdempotencyInProgress = "IDEMPOTENCY_IN_PROGRESS"
	codeInboxEntryExists      = "INBOX_ENTRY_EXISTS"
	codeLeaseLost             = "RUN_LEASE_LOST"
	codeInvalidInput          = "INVALID_INPUT"
	codeInputTooLarge         = "INPUT_TOO_LARGE"
	codeNotFound              = "NOT_FOUND"
	codeRecordQuarantined     = "RECORD_QUARANTINED"
	codeJobFinished           = "JOB_FINISHED"
	codeJobNotCancellable     = "JOB_NOT_CANCELLABLE"
)

// ErrorCode returns the code of err: that of a *RunError in its chain, else
// that of the first error with a Code method (the run package's
// ErrNotFound is RUN_NOT_FOUND), else NOT_FOUND for [ErrNotFound],
// INVALID_INPUT for [ErrInvalidInput] (an id a caller passed among them),
// RUN_LEASE_LOST for [ErrLeaseLost], UPSTREAM_UNAVAILABLE for
// [ErrUnavailable] and RECORD_QUARANTINED for [ErrCorrupt], else
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
	case errors.Is(err, ErrNotFound):
		return codeNotFound
	case errors.Is(err, ErrInvalidInput):
		return codeInvalidInput
	case errors.Is(err, ErrLeaseLost):
		return codeLeaseLost
	case errors.Is(err, ErrUnavailable):
		return codeUpstreamUnavailable
	case errors.Is(err, ErrCorrupt):
		return codeRecordQuarantined
	}
	return codeInternalError
}
