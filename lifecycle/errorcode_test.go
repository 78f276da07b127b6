package lifecycle_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

func TestErrorCodeOfSentinels(t *testing.T) {
	t.Parallel()
	idErr := storekey.ValidateID("job id", "../x")
	tests := []struct {
		name string
		err  error
		code string
		http int
	}{
		{"storage not found", &storage.OpError{Op: "get", Key: "jobs/x.json", Kind: storage.ErrNotFound}, codes.NotFound, 404},
		{"invalid id", fmt.Errorf("queue: %w", idErr), codes.InvalidInput, 400},
		{"input too large", &lifecycle.InputError{Field: "reason", Limit: 1, Size: 2}, codes.InputTooLarge, 413},
		{"invalid input", &lifecycle.InputError{Field: "reason", Limit: 1}, codes.InvalidInput, 400},
		{"a step's code wins", lifecycle.NewRunError(codes.NLMUnavailable, "%v", storage.ErrNotFound), codes.NLMUnavailable, 502},
		{"precondition failed", storage.ErrPreconditionFailed, codes.InternalError, 500},
		{"lease lost (typed)", &lifecycle.LeaseLostError{Key: "jobs/x.json", Owner: "w", Epoch: 1}, codes.LeaseLost, 409},
		{"lease lost (sentinel)", fmt.Errorf("job x: %w", lifecycle.ErrLeaseLost), codes.LeaseLost, 409},
		{"store unavailable", &storage.UnavailableError{Op: "get", Key: "k", Err: errors.New("refused")}, codes.UpstreamUnavailable, 502},
		{"store unavailable (sentinel)", fmt.Errorf("x: %w", storage.ErrUnavailable), codes.UpstreamUnavailable, 502},
		{"quarantined record", fmt.Errorf("%w: %w", storage.ErrNotFound, &lifecycle.QuarantinedError{Key: "jobs/x.json", Reason: "cannot decode"}), codes.RecordQuarantined, 410},
		{"corrupt (sentinel)", fmt.Errorf("x: %w", lifecycle.ErrCorrupt), codes.RecordQuarantined, 410},
		{"plain error", errors.New("boom"), codes.InternalError, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code := lifecycle.ErrorCode(tt.err)
			if code != tt.code || codes.HTTPStatus(code) != tt.http {
				t.Errorf("ErrorCode = %s (%d), want %s (%d)", code, codes.HTTPStatus(code), tt.code, tt.http)
			}
		})
	}
}

func TestHTTPStatusOfNewCodes(t *testing.T) {
	t.Parallel()
	tests := map[string]int{
		codes.InvalidInput: 400, codes.InputTooLarge: 413, codes.NotFound: 404,
		codes.InboxEntryExists: 409, codes.InboxEntryExpired: 410, codes.InboxInvalidTransition: 409,
		codes.Unauthorized: 401, codes.MethodNotAllowed: 405, codes.UnsupportedMediaType: 415,
		codes.ServiceUnavailable: 503, codes.JobNotFound: 404, codes.JobExists: 409,
		codes.AgentNotFound: 404, codes.Conflict: 409,
		codes.WebhookSignatureInvalid: 401, codes.WebhookStale: 401,
	}
	for code, want := range tests {
		if got := codes.HTTPStatus(code); got != want {
			t.Errorf("HTTPStatus(%s) = %d, want %d", code, got, want)
		}
	}
}
