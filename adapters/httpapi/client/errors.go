package client

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
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

	// batch is the index and the landed jobs of a batch's failure at one
	// job (EnqueueMany reports them as a *lifecycle.BatchError).
	batch *batchFailure
}

// batchFailure is what POST /jobs/batch's error answer adds.
type batchFailure struct {
	Index  int
	Landed []lifecycle.Job
}

// Error renders the status, code and message.
func (e *Error) Error() string {
	return fmt.Sprintf("httpapi: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches the sentinel of the SDK that the code stands for:
// lifecycle.ErrRunNotFound and the store's not-found sentinel for
// RUN_NOT_FOUND; the store's not-found sentinel for NOT_FOUND,
// JOB_NOT_FOUND and AGENT_NOT_FOUND; lifecycle.ErrInvalidTransition for
// RUN_INVALID_TRANSITION, INBOX_INVALID_TRANSITION, INBOX_ENTRY_EXPIRED and
// RUN_TERMINAL_STATE (which also matches lifecycle.ErrTerminalState);
// lifecycle.ErrForbiddenActor and the authority matrix's sentinel for
// FORBIDDEN; the invalid-input sentinel for INVALID_INPUT and
// INPUT_TOO_LARGE; lifecycle.ErrIdempotencyConflict,
// lifecycle.ErrIdempotencyExpired, lifecycle.ErrIdempotencyInProgress,
// lifecycle.ErrRunUnsupported, lifecycle.ErrJobExists,
// lifecycle.ErrJobFinished, lifecycle.ErrJobNotCancellable,
// lifecycle.ErrInboxEntryExists, and the store's sentinels of a corrupt
// record (RECORD_QUARANTINED), a lost lease and an unavailable store for
// their codes. The engines' sentinels are these values under their own
// names (run.ErrNotFound is lifecycle.ErrRunNotFound, lifecycle.ErrNotFound
// the store's not-found), so they match too.
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
		return []error{lifecycle.ErrRunNotFound, lifecycle.ErrNotFound}
	case codes.NotFound, codes.JobNotFound, codes.AgentNotFound:
		return []error{lifecycle.ErrNotFound}
	case codes.InvalidTransition, codes.InboxInvalidTransition, codes.InboxEntryExpired:
		return []error{lifecycle.ErrInvalidTransition}
	case codes.TerminalState:
		return []error{lifecycle.ErrInvalidTransition, lifecycle.ErrTerminalState}
	case codes.Forbidden:
		return []error{lifecycle.ErrForbiddenActor, lifecycle.ErrForbiddenActor}
	case codes.InvalidInput, codes.InputTooLarge:
		return []error{lifecycle.ErrInvalidInput}
	case codes.IdempotencyConflict:
		return []error{lifecycle.ErrIdempotencyConflict}
	case codes.IdempotencyInProgress:
		return []error{lifecycle.ErrIdempotencyInProgress}
	case codes.IdempotencyExpired:
		return []error{lifecycle.ErrIdempotencyExpired}
	case codes.Unsupported:
		return []error{lifecycle.ErrRunUnsupported}
	case codes.JobExists:
		return []error{lifecycle.ErrJobExists}
	case codes.JobFinished:
		return []error{lifecycle.ErrJobFinished}
	case codes.JobNotCancellable:
		return []error{lifecycle.ErrJobNotCancellable}
	case codes.InboxEntryExists:
		return []error{lifecycle.ErrInboxEntryExists}
	case codes.RecordQuarantined:
		return []error{lifecycle.ErrCorrupt}
	case codes.LeaseLost:
		return []error{lifecycle.ErrLeaseLost}
	case codes.UpstreamUnavailable:
		return []error{lifecycle.ErrUnavailable}
	}
	return nil
}

// transitionBody is the JSON of an error answer: the error, and the move
// of a refused one or the job of a batch that failed at one.
type transitionBody struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	From    string   `json:"from"`
	To      string   `json:"to"`
	Allowed []string `json:"allowed"`
	// Index and Landed are a batch's failure at one job.
	Index  *int            `json:"index"`
	Landed []lifecycle.Job `json:"landed"`
}

// decodeError reads an error answer; a body that is not the JSON form
// keeps its first line as the message.
func decodeError(status int, body []byte) *Error {
	var b transitionBody
	if json.Unmarshal(body, &b) == nil && b.Code != "" {
		e := &Error{Status: status, Code: b.Code, Message: b.Message, From: b.From, To: b.To, Allowed: b.Allowed}
		if b.Index != nil {
			e.batch = &batchFailure{Index: *b.Index, Landed: b.Landed}
		}
		return e
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	return &Error{Status: status, Code: codes.OfStatus(status), Message: msg}
}
