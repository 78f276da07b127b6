package codes

import "net/http"

// Error codes a run can fail with, and the other codes of the API: the one
// code table, documented in docs/spec.md#error-codes (a test holds the
// two together).
const (
	// InvalidTransition and TerminalState: the machine has no such move,
	// or the run is terminal.
	InvalidTransition = "RUN_INVALID_TRANSITION"
	TerminalState     = "RUN_TERMINAL_STATE"
	// Forbidden is the code of a refused actor (the transition's actors or
	// the authority matrix, docs/spec.md#authority-matrix).
	Forbidden = "FORBIDDEN"

	NLMUnavailable      = "NLM_UNAVAILABLE"
	UpstreamUnavailable = "UPSTREAM_UNAVAILABLE"
	AgentTimeout        = "AGENT_TIMEOUT"
	InternalError       = "INTERNAL_ERROR"
	RunOrphaned         = "RUN_ORPHANED"
	RunResumeFailed     = "RUN_RESUME_FAILED"
	IdempotencyConflict = "IDEMPOTENCY_CONFLICT"
	IdempotencyExpired  = "IDEMPOTENCY_EXPIRED"
	// IdempotencyInProgress: the key's run is still being created and
	// this request could not finish creating it; retry after Retry-After.
	IdempotencyInProgress = "IDEMPOTENCY_IN_PROGRESS"
	// IdempotencyDuplicate: the run was created twice under one key by a
	// store that accepted a create-only write over an existing record; this
	// one never executed (the error names the run that did).
	IdempotencyDuplicate = "IDEMPOTENCY_DUPLICATE"
	// ApprovalRejected is the error of a run whose approval was refused.
	ApprovalRejected = "APPROVAL_REJECTED"
	// Canceled is the error of a run that was canceled.
	Canceled = "CANCELED"
	// RunNotFound: no run has the id.
	RunNotFound = "RUN_NOT_FOUND"
	// InvalidRequest: the request was malformed.
	InvalidRequest = "INVALID_REQUEST"
	// InvalidCursor answers a list's cursor that no page of that list
	// handed out (altered, or of another list).
	InvalidCursor = "INVALID_CURSOR"
	// Unsupported: the run's machine has no such operation.
	Unsupported = "RUN_UNSUPPORTED_OPERATION"
	// LeaseLost: this runner no longer owns the run.
	LeaseLost = "RUN_LEASE_LOST"
	// InvalidInput: a field is not clean text (invalid UTF-8, NUL, a
	// control character) or an id is malformed; see [InputError].
	InvalidInput = "INVALID_INPUT"
	// InputTooLarge: a field is over its documented limit (MaxTextBytes
	// and the others).
	InputTooLarge = "INPUT_TOO_LARGE"
	// NotFound: the record asked for does not exist (a missing run is
	// RUN_NOT_FOUND).
	NotFound = "NOT_FOUND"
	// InboxEntryExists: an inbox entry with the id exists (or expired).
	InboxEntryExists = "INBOX_ENTRY_EXISTS"
	// InboxEntryExpired: the inbox entry expired; it can no longer be
	// processed or rejected.
	InboxEntryExpired = "INBOX_ENTRY_EXPIRED"
	// InboxInvalidTransition: the inbox entry machine refused the move,
	// e.g. processing a rejected entry.
	InboxInvalidTransition = "INBOX_INVALID_TRANSITION"
	// RecordQuarantined: the record could not be decoded or failed
	// validation, and was moved under quarantine/ (lifecycle.QuarantinedError).
	RecordQuarantined = "RECORD_QUARANTINED"

	// Codes of the HTTP surface (adapters/httpapi): the request, not the
	// record, is wrong.

	// Unauthorized: no bearer token, or one the server does not know.
	Unauthorized = "UNAUTHORIZED"
	// MethodNotAllowed: a known path asked with another method.
	MethodNotAllowed = "METHOD_NOT_ALLOWED"
	// UnsupportedMediaType: a body that is not application/json.
	UnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	// ServiceUnavailable: the surface asked for is not served by this
	// process right now (e.g. no event feed); the caller falls back (polls).
	ServiceUnavailable = "SERVICE_UNAVAILABLE"
	// JobNotFound: no job has the id (the job routes' NOT_FOUND).
	JobNotFound = "JOB_NOT_FOUND"
	// JobExists: a job with the id exists (lifecycle.ErrJobExists).
	JobExists = "JOB_EXISTS"
	// JobFinished: the job asked to cancel has finished
	// (lifecycle.ErrJobFinished).
	JobFinished = "JOB_FINISHED"
	// JobNotCancellable: the job asked to cancel runs on the spec's
	// machine, which has no cancel (lifecycle.ErrJobNotCancellable).
	JobNotCancellable = "JOB_NOT_CANCELLABLE"
	// AgentNotFound: no agent has the slug.
	AgentNotFound = "AGENT_NOT_FOUND"
	// Conflict: a conditional write lost to another writer, e.g.
	// restoring a quarantined record whose key was written since.
	Conflict = "CONFLICT"

	// Codes of the webhook intake (adapters/httpapi/internal/webhook): the sender
	// could not be authenticated.

	// WebhookSignatureInvalid: a webhook's signature header is
	// missing, malformed or does not match the body under the source's
	// secret (for Slack, also a missing or malformed timestamp, which the
	// signature covers).
	WebhookSignatureInvalid = "WEBHOOK_SIGNATURE_INVALID"
	// WebhookStale: a correctly signed Slack request whose timestamp
	// is more than 5 minutes from the server's clock, either way: a replay.
	WebhookStale = "WEBHOOK_STALE"
)

// httpStatus is the one table from error code to HTTP status
// (docs/spec.md#codes-and-http-statuses).
var httpStatus = map[string]int{
	NLMUnavailable:      http.StatusBadGateway,
	UpstreamUnavailable: http.StatusBadGateway,
	AgentTimeout:        http.StatusGatewayTimeout,
	InternalError:       http.StatusInternalServerError,
	RunOrphaned:         http.StatusInternalServerError,
	RunResumeFailed:     http.StatusInternalServerError,
	InvalidTransition:   http.StatusConflict,
	TerminalState:       http.StatusConflict,
	Forbidden:           http.StatusForbidden,
	IdempotencyConflict: http.StatusConflict,
	IdempotencyExpired:  http.StatusGone,
	// 409 (not 503): the store answered, the key is busy; Retry-After says when.
	IdempotencyInProgress: http.StatusConflict,
	IdempotencyDuplicate:  http.StatusConflict,
	ApprovalRejected:      http.StatusConflict,
	Canceled:              http.StatusConflict,
	RunNotFound:           http.StatusNotFound,
	InvalidRequest:        http.StatusBadRequest,
	InvalidCursor:         http.StatusBadRequest,
	Unsupported:           http.StatusConflict,
	LeaseLost:             http.StatusConflict,
	InvalidInput:          http.StatusBadRequest,
	InputTooLarge:         http.StatusRequestEntityTooLarge,
	NotFound:              http.StatusNotFound,

	InboxEntryExists:       http.StatusConflict,
	InboxEntryExpired:      http.StatusGone,
	InboxInvalidTransition: http.StatusConflict,
	RecordQuarantined:      http.StatusGone,

	Unauthorized:         http.StatusUnauthorized,
	MethodNotAllowed:     http.StatusMethodNotAllowed,
	UnsupportedMediaType: http.StatusUnsupportedMediaType,
	ServiceUnavailable:   http.StatusServiceUnavailable,
	JobNotFound:          http.StatusNotFound,
	JobExists:            http.StatusConflict,
	JobFinished:          http.StatusConflict,
	JobNotCancellable:    http.StatusConflict,
	AgentNotFound:        http.StatusNotFound,
	Conflict:             http.StatusConflict,

	WebhookSignatureInvalid: http.StatusUnauthorized,
	WebhookStale:            http.StatusUnauthorized,
}

// HTTPStatus maps an error code to the HTTP status an API answers with; an
// unknown code is a 500.
func HTTPStatus(code string) int {
	if s, ok := httpStatus[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// OfStatus names the code of an error answer that carries none (a proxy's,
// or the NLM sink's plain text) by its HTTP status; any other status is
// INTERNAL_ERROR.
func OfStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return InvalidRequest
	case http.StatusUnauthorized:
		return Unauthorized
	case http.StatusForbidden:
		return Forbidden
	case http.StatusNotFound:
		return NotFound
	case http.StatusMethodNotAllowed:
		return MethodNotAllowed
	case http.StatusConflict:
		return Conflict
	case http.StatusRequestEntityTooLarge:
		return InputTooLarge
	case http.StatusUnsupportedMediaType:
		return UnsupportedMediaType
	case http.StatusServiceUnavailable:
		return ServiceUnavailable
	case http.StatusBadGateway:
		return UpstreamUnavailable
	}
	return InternalError
}

// Error codes written to Job.ErrorCode.
const (
	JobTimeout            = "TIMEOUT"
	JobRateLimited        = "RATE_LIMITED"
	JobUnavailable        = "UNAVAILABLE"
	JobArtifactWriteError = "ARTIFACT_WRITE_ERROR"
	JobLeaseExpired       = "LEASE_EXPIRED"
	JobHandlerError       = "HANDLER_ERROR"
	// JobPermanent: a handler said Permanent; the job was not retried.
	JobPermanent = "PERMANENT"
	// JobCancelled: an operator cancelled the job (general machine only).
	JobCancelled = "CANCELLED"
)
