package codes_test

import (
	"errors"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestLifecycleSpellsTheTable: the types package spells the codes of its
// own errors (it imports nothing); each must be the table's code, so the
// table stays the one list of codes and their HTTP statuses.
func TestLifecycleSpellsTheTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"invalid transition", &lifecycle.InvalidTransitionError{}, codes.InvalidTransition},
		{"terminal state", &lifecycle.InvalidTransitionError{Terminal: true}, codes.TerminalState},
		{"forbidden actor", &lifecycle.ForbiddenActorError{}, codes.Forbidden},
		{"run not found", lifecycle.ErrRunNotFound, codes.RunNotFound},
		{"unsupported", lifecycle.ErrRunUnsupported, codes.Unsupported},
		{"idempotency in progress", lifecycle.ErrIdempotencyInProgress, codes.IdempotencyInProgress},
		{"inbox entry exists", lifecycle.ErrInboxEntryExists, codes.InboxEntryExists},
		{"lease lost", &lifecycle.LeaseLostError{}, codes.LeaseLost},
		{"lease lost (sentinel)", lifecycle.ErrLeaseLost, codes.LeaseLost},
		{"invalid input", &lifecycle.InputError{Limit: 1}, codes.InvalidInput},
		{"invalid input (sentinel)", lifecycle.ErrInvalidInput, codes.InvalidInput},
		{"input too large", &lifecycle.InputError{Limit: 1, Size: 2}, codes.InputTooLarge},
		{"not found", lifecycle.ErrNotFound, codes.NotFound},
		{"unavailable", lifecycle.ErrUnavailable, codes.UpstreamUnavailable},
		{"quarantined", &lifecycle.QuarantinedError{}, codes.RecordQuarantined},
		{"corrupt (sentinel)", lifecycle.ErrCorrupt, codes.RecordQuarantined},
		{"a step's code", lifecycle.NewRunError(codes.NLMUnavailable, "x"), codes.NLMUnavailable},
		{"internal", errors.New("boom"), codes.InternalError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := lifecycle.ErrorCode(tt.err)
			if got != tt.want {
				t.Errorf("ErrorCode = %s, want the table's %s", got, tt.want)
			}
			if codes.HTTPStatus(got) == 500 && got != codes.InternalError {
				t.Errorf("%s has no HTTP status in the table", got)
			}
		})
	}
}
