package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

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
	case errors.Is(err, lifecycle.ErrJobExists):
		return codes.JobExists
	case errors.Is(err, lifecycle.ErrInvalidJob):
		return codes.InvalidRequest
	case errors.Is(err, context.DeadlineExceeded):
		// The request's deadline ran out while the SDK waited out the store.
		return codes.UpstreamUnavailable
	case errors.Is(err, storage.ErrOutcomeUnknown), storage.Transient(err):
		// The store could not say whether a write happened (before the
		// conflict case: such an error may carry the 412 of a retry), or
		// failed in a way that passes: its trouble, not the server's. A
		// client retries (with its idempotency key), and the retry finds
		// out.
		return codes.UpstreamUnavailable
	case errors.Is(err, storage.ErrPreconditionFailed):
		return codes.Conflict
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
	var later interface{ RetryAfter() time.Duration }
	if errors.As(err, &later) {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(later.RetryAfter().Round(time.Second)/time.Second))))
	}
	if be, ok := errors.AsType[*lifecycle.BatchError](err); ok {
		// A batch failed at one job: which, and what landed before it.
		landed := []lifecycle.Job{}
		if bf, ok := errors.AsType[*batchFailure](err); ok && bf.landed != nil {
			landed = bf.landed
		}
		_ = writeJSON(w, status, wire.BatchErrorBody{Code: code, Message: msg, Index: be.Index, Landed: landed})
		return
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
