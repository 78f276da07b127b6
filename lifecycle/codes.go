package lifecycle

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/runconveyor/conveyor/storage"
)

// Error codes a run can fail with (seed 000 §5.3), and the other codes of the
// run API (seed 004 appendix and Conveyor's own).
const (
	// CodeInvalidTransition and CodeTerminalState are seed 004's (appendix):
	// the machine has no such move, or the run is terminal.
	CodeInvalidTransition = "RUN_INVALID_TRANSITION"
	CodeTerminalState     = "RUN_TERMINAL_STATE"
	// CodeForbidden is the code of a refused actor (seed 003 §4 authority matrix).
	CodeForbidden = "FORBIDDEN"

	CodeNLMUnavailable      = "NLM_UNAVAILABLE"
	CodeUpstreamUnavailable = "UPSTREAM_UNAVAILABLE"
	CodeAgentTimeout        = "AGENT_TIMEOUT"
	CodeInternalError       = "INTERNAL_ERROR"
	CodeRunOrphaned         = "RUN_ORPHANED"
	CodeRunResumeFailed     = "RUN_RESUME_FAILED"
	CodeIdempotencyConflict = "IDEMPOTENCY_CONFLICT"
	CodeIdempotencyExpired  = "IDEMPOTENCY_EXPIRED"
	// CodeApprovalRejected is the error of a run whose approval was refused.
	CodeApprovalRejected = "APPROVAL_REJECTED"
	// CodeCanceled is the error of a run that was canceled.
	CodeCanceled = "CANCELED"
	// CodeRunNotFound: no run has the id.
	CodeRunNotFound = "RUN_NOT_FOUND"
	// CodeInvalidRequest: the request was malformed.
	CodeInvalidRequest = "INVALID_REQUEST"
	// CodeUnsupported: the run's machine has no such operation.
	CodeUnsupported = "RUN_UNSUPPORTED_OPERATION"
	// CodeLeaseLost: this runner no longer owns the run.
	CodeLeaseLost = "RUN_LEASE_LOST"
	// CodeInvalidInput: a field is not clean text (invalid UTF-8, NUL, a
	// control character) or an id is malformed; see [InputError].
	CodeInvalidInput = "INVALID_INPUT"
	// CodeInputTooLarge: a field is over its documented limit (MaxTextBytes
	// and the others).
	CodeInputTooLarge = "INPUT_TOO_LARGE"
	// CodeNotFound: the record asked for does not exist (a missing run is
	// RUN_NOT_FOUND).
	CodeNotFound = "NOT_FOUND"
	// CodeInboxEntryExists: an inbox entry with the id exists (or expired).
	CodeInboxEntryExists = "INBOX_ENTRY_EXISTS"
	// CodeInboxEntryExpired: the inbox entry expired; it can no longer be
	// processed or rejected.
	CodeInboxEntryExpired = "INBOX_ENTRY_EXPIRED"
	// CodeInboxInvalidTransition: the inbox entry machine refused the move,
	// e.g. processing a rejected entry.
	CodeInboxInvalidTransition = "INBOX_INVALID_TRANSITION"
	// CodeRecordQuarantined: the record could not be decoded or failed
	// validation, and was moved under quarantine/ (storage.CorruptError).
	CodeRecordQuarantined = "RECORD_QUARANTINED"

	// Codes of the HTTP surface (adapters/httpapi): the request, not the
	// record, is wrong.

	// CodeUnauthorized: no bearer token, or one the server does not know.
	CodeUnauthorized = "UNAUTHORIZED"
	// CodeMethodNotAllowed: a known path asked with another method.
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	// CodeUnsupportedMediaType: a body that is not application/json.
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	// CodeServiceUnavailable: the surface asked for is not served by this
	// process right now (e.g. no event feed); the caller falls back (polls).
	CodeServiceUnavailable = "SERVICE_UNAVAILABLE"
	// CodeJobNotFound: no job has the id (the job routes' NOT_FOUND).
	CodeJobNotFound = "JOB_NOT_FOUND"
	// CodeJobExists: a job with the id exists (jobqueue.ErrJobExists).
	CodeJobExists = "JOB_EXISTS"
	// CodeAgentNotFound: no agent has the slug.
	CodeAgentNotFound = "AGENT_NOT_FOUND"
	// CodeConflict: a conditional write lost to another writer, e.g.
	// restoring a quarantined record whose key was written since.
	CodeConflict = "CONFLICT"

	// Codes of the webhook intake (adapters/httpapi/webhook): the sender
	// could not be authenticated.

	// CodeWebhookSignatureInvalid: a webhook's signature header is
	// missing, malformed or does not match the body under the source's
	// secret (for Slack, also a missing or malformed timestamp, which the
	// signature covers).
	CodeWebhookSignatureInvalid = "WEBHOOK_SIGNATURE_INVALID"
	// CodeWebhookStale: a correctly signed Slack request whose timestamp
	// is more than 5 minutes from the server's clock, either way: a replay.
	CodeWebhookStale = "WEBHOOK_STALE"
)

// httpStatus is the one table from error code to HTTP status (seed 000 §5.3
// for the failure codes).
var httpStatus = map[string]int{
	CodeNLMUnavailable:      http.StatusBadGateway,
	CodeUpstreamUnavailable: http.StatusBadGateway,
	CodeAgentTimeout:        http.StatusGatewayTimeout,
	CodeInternalError:       http.StatusInternalServerError,
	CodeRunOrphaned:         http.StatusInternalServerError,
	CodeRunResumeFailed:     http.StatusInternalServerError,
	CodeInvalidTransition:   http.StatusConflict,
	CodeTerminalState:       http.StatusConflict,
	CodeForbidden:           http.StatusForbidden,
	CodeIdempotencyConflict: http.StatusConflict,
	CodeIdempotencyExpired:  http.StatusGone,
	CodeApprovalRejected:    http.StatusConflict,
	CodeCanceled:            http.StatusConflict,
	CodeRunNotFound:         http.StatusNotFound,
	CodeInvalidRequest:      http.StatusBadRequest,
	CodeUnsupported:         http.StatusConflict,
	CodeLeaseLost:           http.StatusConflict,
	CodeInvalidInput:        http.StatusBadRequest,
	CodeInputTooLarge:       http.StatusRequestEntityTooLarge,
	CodeNotFound:            http.StatusNotFound,

	CodeInboxEntryExists:       http.StatusConflict,
	CodeInboxEntryExpired:      http.StatusGone,
	CodeInboxInvalidTransition: http.StatusConflict,
	CodeRecordQuarantined:      http.StatusGone,

	CodeUnauthorized:         http.StatusUnauthorized,
	CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	CodeServiceUnavailable:   http.StatusServiceUnavailable,
	CodeJobNotFound:          http.StatusNotFound,
	CodeJobExists:            http.StatusConflict,
	CodeAgentNotFound:        http.StatusNotFound,
	CodeConflict:             http.StatusConflict,

	CodeWebhookSignatureInvalid: http.StatusUnauthorized,
	CodeWebhookStale:            http.StatusUnauthorized,
}

// HTTPStatus maps an error code to the HTTP status an API answers with; an
// unknown code is a 500.
func HTTPStatus(code string) int {
	if s, ok := httpStatus[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

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
		return CodeNotFound
	case errors.Is(err, storage.ErrInvalidID):
		return CodeInvalidInput
	case errors.Is(err, storage.ErrLeaseLost):
		return CodeLeaseLost
	case errors.Is(err, storage.ErrUnavailable):
		return CodeUpstreamUnavailable
	case errors.Is(err, storage.ErrCorrupt):
		return CodeRecordQuarantined
	}
	return CodeInternalError
}

// RunError is an error with a seed code. A step returns one (or wraps one)
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
