package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/runconveyor/conveyor/authority"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
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
// authority.ErrForbidden for FORBIDDEN; lifecycle.ErrInvalidInput for
// INVALID_INPUT and INPUT_TOO_LARGE; run.ErrIdempotencyConflict,
// run.ErrIdempotencyExpired, run.ErrUnsupported, jobqueue.ErrJobExists,
// inbox.ErrEntryExists, storage.ErrCorrupt (RECORD_QUARANTINED),
// storage.ErrLeaseLost and storage.ErrUnavailable for their codes.
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
	case lifecycle.CodeRunNotFound:
		return []error{run.ErrNotFound, storage.ErrNotFound}
	case lifecycle.CodeNotFound, lifecycle.CodeJobNotFound, lifecycle.CodeAgentNotFound:
		return []error{storage.ErrNotFound}
	case lifecycle.CodeInvalidTransition, lifecycle.CodeInboxInvalidTransition, lifecycle.CodeInboxEntryExpired:
		return []error{lifecycle.ErrInvalidTransition}
	case lifecycle.CodeTerminalState:
		return []error{lifecycle.ErrInvalidTransition, lifecycle.ErrTerminalState}
	case lifecycle.CodeForbidden:
		return []error{lifecycle.ErrForbiddenActor, authority.ErrForbidden}
	case lifecycle.CodeInvalidInput, lifecycle.CodeInputTooLarge:
		return []error{lifecycle.ErrInvalidInput}
	case lifecycle.CodeIdempotencyConflict:
		return []error{run.ErrIdempotencyConflict}
	case lifecycle.CodeIdempotencyExpired:
		return []error{run.ErrIdempotencyExpired}
	case lifecycle.CodeUnsupported:
		return []error{run.ErrUnsupported}
	case lifecycle.CodeJobExists:
		return []error{jobqueue.ErrJobExists}
	case lifecycle.CodeInboxEntryExists:
		return []error{inbox.ErrEntryExists}
	case lifecycle.CodeRecordQuarantined:
		return []error{storage.ErrCorrupt}
	case lifecycle.CodeLeaseLost:
		return []error{storage.ErrLeaseLost}
	case lifecycle.CodeUpstreamUnavailable:
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
	if code != lifecycle.CodeInternalError {
		var je *jobError
		if code == lifecycle.CodeNotFound && errors.As(err, &je) {
			return lifecycle.CodeJobNotFound
		}
		return code
	}
	switch {
	case errors.Is(err, jobqueue.ErrJobExists):
		return lifecycle.CodeJobExists
	case errors.Is(err, jobqueue.ErrInvalidJob), errors.Is(err, run.ErrInvalidIdempotencyKey):
		return lifecycle.CodeInvalidRequest
	case errors.Is(err, storage.ErrPreconditionFailed):
		return lifecycle.CodeConflict
	case errors.Is(err, context.DeadlineExceeded):
		// The request's deadline ran out while the SDK waited out the store.
		return lifecycle.CodeUpstreamUnavailable
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
	status := lifecycle.HTTPStatus(code)
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
		return lifecycle.CodeInvalidRequest
	case http.StatusUnauthorized:
		return lifecycle.CodeUnauthorized
	case http.StatusForbidden:
		return lifecycle.CodeForbidden
	case http.StatusNotFound:
		return lifecycle.CodeNotFound
	case http.StatusMethodNotAllowed:
		return lifecycle.CodeMethodNotAllowed
	case http.StatusConflict:
		return lifecycle.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return lifecycle.CodeInputTooLarge
	case http.StatusUnsupportedMediaType:
		return lifecycle.CodeUnsupportedMediaType
	case http.StatusServiceUnavailable:
		return lifecycle.CodeServiceUnavailable
	case http.StatusBadGateway:
		return lifecycle.CodeUpstreamUnavailable
	}
	return lifecycle.CodeInternalError
}
