package lifecycle_test

import (
	"context"
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
		{"run not found", fmt.Errorf("%w: run_x", lifecycle.ErrRunNotFound), lifecycle.CodeRunNotFound, 404},
		{"run not found over storage", fmt.Errorf("%w: %w", lifecycle.ErrRunNotFound, storage.ErrNotFound), lifecycle.CodeRunNotFound, 404},
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
	}
	for code, want := range tests {
		if got := lifecycle.HTTPStatus(code); got != want {
			t.Errorf("HTTPStatus(%s) = %d, want %d", code, got, want)
		}
	}
}

// A missing run is a 404 on every Runner call that names one.
func TestMissingRunIsNotFound(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	agent := lifecycle.Agent{Slug: "ap", Machine: lifecycle.MachineApproval, Steps: []lifecycle.Step{okStep("s")}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	const id = "run_2026-02-14_080000_abc123"
	calls := map[string]func() error{
		"Status": func() error { _, err := r.Status(ctx, id); return err },
		"Steps":  func() error { _, err := r.Steps(ctx, id); return err },
		"Wait":   func() error { _, err := r.Wait(ctx, id); return err },
		"Cancel": func() error { _, err := r.Cancel(ctx, id, lifecycle.ActorGateway, "x"); return err },
		"Approve": func() error {
			_, err := r.Approve(ctx, id, lifecycle.ActorGateway, lifecycle.Decision{DecidedBy: "owner"})
			return err
		},
		"Reject": func() error {
			_, err := r.Reject(ctx, id, lifecycle.ActorGateway, lifecycle.Decision{DecidedBy: "owner"})
			return err
		},
		"Deliver": func() error {
			_, err := r.Deliver(ctx, id, lifecycle.ActorGateway, lifecycle.ExternalEvent{Type: "e"})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, lifecycle.ErrRunNotFound) || lifecycle.ErrorCode(err) != lifecycle.CodeRunNotFound ||
			lifecycle.HTTPStatus(lifecycle.ErrorCode(err)) != 404 {
			t.Errorf("%s: %v (code %s), want RUN_NOT_FOUND / 404", name, err, lifecycle.ErrorCode(err))
		}
	}
}
