package run_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// ErrNotFound carries its own code: lifecycle.ErrorCode knows no run.
func TestErrNotFoundCode(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		fmt.Errorf("%w: run_x", lifecycle.ErrRunNotFound),
		fmt.Errorf("%w: %w", lifecycle.ErrRunNotFound, storage.ErrNotFound),
	} {
		if code := lifecycle.ErrorCode(err); code != codes.RunNotFound || codes.HTTPStatus(code) != 404 {
			t.Errorf("ErrorCode(%v) = %s, want RUN_NOT_FOUND / 404", err, code)
		}
	}
}

// A missing run is a 404 on every Runner call that names one.
func TestMissingRunIsNotFound(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	agent := run.Agent{Slug: "ap", Machine: lifecycle.MachineApproval, Steps: []run.Step{okStep("s")}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	const id = "run_2026-02-14_080000_abc123"
	calls := map[string]func() error{
		"Status": func() error { _, err := r.Status(ctx, id); return err },
		"Steps":  func() error { _, err := r.Steps(ctx, id); return err },
		"Wait":   func() error { _, err := r.Wait(ctx, id); return err },
		"Cancel": func() error {
			_, err := r.Cancel(ctx, id, lifecycle.ActorGateway, run.CancelRequest{Reason: "x"})
			return err
		},
		"Approve": func() error {
			_, err := r.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner"})
			return err
		},
		"Reject": func() error {
			_, err := r.Reject(ctx, id, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner"})
			return err
		},
		"Deliver": func() error {
			_, err := r.Deliver(ctx, id, lifecycle.ActorGateway, run.ExternalEvent{Type: "e"})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, lifecycle.ErrRunNotFound) || lifecycle.ErrorCode(err) != codes.RunNotFound ||
			codes.HTTPStatus(lifecycle.ErrorCode(err)) != 404 {
			t.Errorf("%s: %v (code %s), want RUN_NOT_FOUND / 404", name, err, lifecycle.ErrorCode(err))
		}
	}
}
