package lifecycle_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

func TestErrorCodeOfSentinels(t *testing.T) {
	t.Parallel()
	idErr := storage.ValidateID("job id", "../x")
	tests := []struct {
		name string
		err  error
		code string
		http int
	}{
		{"storage not found", storage.NewOpError("get", "jobs/x.json", storage.ErrNotFound, nil), lifecycle.CodeNotFound, 404},
		{"invalid id", fmt.Errorf("queue: %w", idErr), lifecycle.CodeInvalidInput, 400},
		{"input too large", &lifecycle.InputError{Field: "reason", Limit: 1, Size: 2}, lifecycle.CodeInputTooLarge, 413},
		{"invalid input", &lifecycle.InputError{Field: "reason", Limit: 1}, lifecycle.CodeInvalidInput, 400},
		{"a step's code wins", lifecycle.NewRunError(lifecycle.CodeNLMUnavailable, "%v", storage.ErrNotFound), lifecycle.CodeNLMUnavailable, 502},
		{"precondition failed", storage.ErrPreconditionFailed, lifecycle.CodeInternalError, 500},
		{"lease lost (typed)", &storage.LeaseLostError{Key: "jobs/x.json", Owner: "w", Epoch: 1}, lifecycle.CodeLeaseLost, 409},
		{"lease lost (sentinel)", fmt.Errorf("job x: %w", storage.ErrLeaseLost), lifecycle.CodeLeaseLost, 409},
		{"store unavailable", &storage.UnavailableError{Op: "get", Key: "k", Err: errors.New("refused")}, lifecycle.CodeUpstreamUnavailable, 502},
		{"store unavailable (sentinel)", fmt.Errorf("x: %w", storage.ErrUnavailable), lifecycle.CodeUpstreamUnavailable, 502},
		{"quarantined record", fmt.Errorf("%w: %w", storage.ErrNotFound, &storage.CorruptError{Key: "jobs/x.json", Reason: "cannot decode"}), lifecycle.CodeRecordQuarantined, 410},
		{"corrupt (sentinel)", fmt.Errorf("x: %w", storage.ErrCorrupt), lifecycle.CodeRecordQuarantined, 410},
		{"plain error", errors.New("boom"), lifecycle.CodeInternalError, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code := lifecycle.ErrorCode(tt.err)
			if code != tt.code || lifecycle.HTTPStatus(code) != tt.http {
				t.Errorf("ErrorCode = %s (%d), want %s (%d)", code, lifecycle.HTTPStatus(code), tt.code, tt.http)
			}
		})
	}
}

func TestHTTPStatusOfNewCodes(t *testing.T) {
	t.Parallel()
	tests := map[string]int{
		lifecycle.CodeInvalidInput: 400, lifecycle.CodeInputTooLarge: 413, lifecycle.CodeNotFound: 404,
		lifecycle.CodeInboxEntryExists: 409, lifecycle.CodeInboxEntryExpired: 410, lifecycle.CodeInboxInvalidTransition: 409,
		lifecycle.CodeUnauthorized: 401, lifecycle.CodeMethodNotAllowed: 405, lifecycle.CodeUnsupportedMediaType: 415,
		lifecycle.CodeServiceUnavailable: 503, lifecycle.CodeJobNotFound: 404, lifecycle.CodeJobExists: 409,
		lifecycle.CodeAgentNotFound: 404, lifecycle.CodeConflict: 409,
		lifecycle.CodeWebhookSignatureInvalid: 401, lifecycle.CodeWebhookStale: 401,
	}
	for code, want := range tests {
		if got := lifecycle.HTTPStatus(code); got != want {
			t.Errorf("HTTPStatus(%s) = %d, want %d", code, got, want)
		}
	}
}
