package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/authority"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// Error is an error answer of the API: its HTTP status and the body's code
// and message, and for a refused move (409) the move and the states
// reachable from its start. It matches the SDK's sentinels with errors.Is
// (see Is).
type Error struct {
	Status  int
	Code    string
	Message string
	// From, To and Allowed are set for a refused move: Allowed lists the
	// states reachable from From.
	From, To string
	Allowed  []string
}

// Error renders the status, code and message.
func (e *Error) Error() string {
	return fmt.Sprintf("httpapi: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches the sentinel of the SDK that the code stands for:
// run.ErrNotFound and storage.ErrNotFound for RUN_NOT_FOUND;
// storage.ErrNotFound for NOT_FOUND, JOB_NOT_FOUND and AGENT_NOT_FOUND;
// lifecycle.ErrInvalidTransition for RUN_INVALID_TRANSITION,
// INBOX_INVALID_TRANSITION, INBOX_ENTRY_EXPIRED and RUN_TERMINAL_STATE (which
// also matches lifecycle.ErrTerminalState); lifecycle.ErrForbiddenActor and
// authority.ErrForbidden for FORBIDDEN; codes.ErrInvalidInput for
// INVALID_INPUT and INPUT_TOO_LARGE; run.ErrIdempotencyConflict,
// run.ErrIdempotencyExpired, run.ErrUnsupported, jobqueue.ErrJobExists,
// inbox.ErrEntryExists, records.ErrCorrupt (RECORD_QUARANTINED),
// records.ErrLeaseLost and storage.ErrUnavailable for their codes.
func (e *Error) Is(target error) bool {
	for _, s := range sentinels(e.Code) {
		if s == target {
			return true
		}
	}
	return false
}

func sentinels(code string) []error {
	switch code {
	case codes.RunNotFound:
		return []error{lifecycle.ErrRunNotFound, storage.ErrNotFound}
	case codes.NotFound, codes.JobNotFound, codes.AgentNotFound:
		return []error{storage.ErrNotFound}
	case codes.InvalidTransition, codes.InboxInvalidTransition, codes.InboxEntryExpired:
		return []error{lifecycle.ErrInvalidTransition}
	case codes.TerminalState:
		return []error{lifecycle.ErrInvalidTransition, lifecycle.ErrTerminalState}
	case codes.Forbidden:
		return []error{lifecycle.ErrForbiddenActor, authority.ErrForbidden}
	case codes.InvalidInput, codes.InputTooLarge:
		return []error{codes.ErrInvalidInput}
	case codes.IdempotencyConflict:
		return []error{lifecycle.ErrIdempotencyConflict}
	case codes.IdempotencyExpired:
		return []error{lifecycle.ErrIdempotencyExpired}
	case codes.Unsupported:
		return []error{lifecycle.ErrRunUnsupported}
	case codes.JobExists:
		return []error{lifecycle.ErrJobExists}
	case codes.InboxEntryExists:
		return []error{lifecycle.ErrInboxEntryExists}
	case codes.RecordQuarantined:
		return []error{records.ErrCorrupt}
	case codes.LeaseLost:
		return []error{records.ErrLeaseLost}
	case codes.UpstreamUnavailable:
		return []error{storage.ErrUnavailable}
	}
	return nil
}

// errorBody is the JSON of every error answer.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// transitionBody is the JSON of a refused move: the error and the move.
type transitionBody struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	From    string   `json:"from"`
	To      string   `json:"to"`
	Allowed []string `json:"allowed"`
}

// apiError is an error the adapter finds itself, with its code.
type apiError struct {
	code, msg string
}

func (e *apiError) Error() string { return e.msg }
func (e *apiError) Code() string  { return e.code }

func apiErr(code, format string, args ...any) error {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

// codeOf is lifecycle.ErrorCode, with the codes of the sentinels that carry
// none of their own (the job queue's, an idempotency key's scheme) and the
// request's deadline.
func codeOf(err error) string {
	code := lifecycle.ErrorCode(err)
	if code != codes.InternalError {
		var je *jobError
		if code == codes.NotFound && errors.As(err, &je) {
			return codes.JobNotFound
		}
		return code
	}
	switch {
	case errors.Is(err, jobqueue.ErrJobExists):
		return codes.JobExists
	case errors.Is(err, jobqueue.ErrInvalidJob), errors.Is(err, run.ErrInvalidIdempotencyKey):
		return codes.InvalidRequest
	case errors.Is(err, storage.ErrPreconditionFailed):
		return codes.Conflict
	case errors.Is(err, context.DeadlineExceeded):
		// The request's deadline ran out while the SDK waited out the store.
		return codes.UpstreamUnavailable
	}
	return code
}

// jobError marks an error of a job route, whose not-found is
// JOB_NOT_FOUND.
type jobError struct{ err error }

func (e *jobError) Error() string { return e.err.Error() }
func (e *jobError) Unwrap() error { return e.err }

func jobScoped(err error) error {
	if err == nil {
		return nil
	}
	return &jobError{err}
}

// writeError answers err in the JSON form with the code's status.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := codeOf(err)
	status := codes.HTTPStatus(code)
	msg := err.Error()
	if rec, ok := w.(*recorder); ok {
		rec.code, rec.message = code, msg
	}
	var ite *lifecycle.InvalidTransitionError
	if errors.As(err, &ite) && status == http.StatusConflict {
		allowed := append([]string{}, ite.ValidNext...)
		to := ite.To
		if to == "" {
			// An event was fired and no move of it starts at From: name
			// where the event leads elsewhere in the machine.
			to = s.eventTarget(ite.Machine, ite.Event)
		}
		_ = writeJSON(w, status, transitionBody{Code: code, Message: msg, From: ite.From, To: to, Allowed: allowed})
		return
	}
	_ = writeJSON(w, status, errorBody{Code: code, Message: msg})
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	if err != nil {
		return nil // the client went away; nothing more to tell it
	}
	return nil
}

// decodeError reads an error answer; a body that is not the JSON form
// keeps its first line as the message.
func decodeError(status int, body []byte) *Error {
	var b transitionBody
	if json.Unmarshal(body, &b) == nil && b.Code != "" {
		return &Error{Status: status, Code: b.Code, Message: b.Message, From: b.From, To: b.To, Allowed: b.Allowed}
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	return &Error{Status: status, Code: codeOfStatus(status), Message: msg}
}

// codeOfStatus names the code of an answer without one (a proxy's, or
// nlm.Sink's plain text).
func codeOfStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return codes.InvalidRequest
	case http.StatusUnauthorized:
		return codes.Unauthorized
	case http.StatusForbidden:
		return codes.Forbidden
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusMethodNotAllowed:
		return codes.MethodNotAllowed
	case http.StatusConflict:
		return codes.Conflict
	case http.StatusRequestEntityTooLarge:
		return codes.InputTooLarge
	case http.StatusUnsupportedMediaType:
		return codes.UnsupportedMediaType
	case http.StatusServiceUnavailable:
		return codes.ServiceUnavailable
	case http.StatusBadGateway:
		return codes.UpstreamUnavailable
	}
	return codes.InternalError
}
