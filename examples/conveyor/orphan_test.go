package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

func TestRunnerNote(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 2, 14, 8, 5, 0, 0, time.UTC)
	tests := []struct {
		name string
		st   lifecycle.RunStatus
		want string
	}{
		{"plain", lifecycle.RunStatus{}, "-"},
		{"lost", lifecycle.RunStatus{RunnerLostAt: &at}, "lost since 2026-02-14T08:05:00Z"},
		{"taken-over", lifecycle.RunStatus{TakenOverAt: &at}, "taken over at 2026-02-14T08:05:00Z"},
		{"lost-again", lifecycle.RunStatus{RunnerLostAt: &at, TakenOverAt: &at}, "lost since 2026-02-14T08:05:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := runnerNote(tt.st); got != tt.want {
				t.Errorf("runnerNote = %q, want %q", got, tt.want)
			}
		})
	}
}

// A run whose runner stopped heartbeating: `runs` says so in its RUNNER
// column and `status` prints runner_lost_at once the lease lapsed; after
// another runner's takeover, taken over at T. The runners run on a fake
// clock the test moves.
func TestRunsShowALostRunner(t *testing.T) {
	const (
		slug  = "orphan-cli"
		lease = 5 * time.Minute
	)
	store := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fake := clock.NewFake(time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC))
	inA := make(chan struct{}, 1)
	newRunner := func(owner string) *run.Runner {
		work := func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
			if owner != "a" {
				return run.StepOutput{}, nil
			}
			inA <- struct{}{}
			<-ctx.Done() // runner a's step ends only with its runner
			return run.StepOutput{}, ctx.Err()
		}
		r, err := run.NewRunner(run.Config{Store: store, Owner: owner, Clock: fake, Logger: quiet, LeaseDuration: lease, ShutdownGrace: time.Second},
			run.Agent{Slug: slug, Steps: []run.Step{{Name: "work", Idempotent: true, Run: work}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	start := func(r *run.Runner) func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
		}
	}
	a := newRunner("a")
	stopA := start(a)
	res, err := a.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: slug})
	if err != nil {
		stopA()
		t.Fatal(err)
	}
	select {
	case <-inA:
	case <-time.After(30 * time.Second):
		stopA()
		t.Fatal("runner a never started the step")
	}
	stopA() // runner a is lost mid-step: its lease stays behind
	b := newRunner("b")
	srv, err := httpapi.New(httpapi.Config{Runner: b, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	row := func() string {
		t.Helper()
		code, out, errOut := conveyor(t, ts.URL, "runs", slug)
		if code != 0 || !strings.Contains(out, "RUNNER") {
			t.Fatalf("runs: exit %d\n%s%s", code, out, errOut)
		}
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, res.RunID) {
				return l
			}
		}
		t.Fatalf("no row of %s in\n%s", res.RunID, out)
		return ""
	}
	if l := row(); !strings.Contains(l, " running ") || strings.Contains(l, "lost") {
		t.Errorf("while the lease holds: %q", l)
	}
	fake.Advance(lease + time.Second)
	if l := row(); !strings.Contains(l, " running ") || !strings.Contains(l, "lost since 2026-02-14T08:05:00Z") {
		t.Errorf("after the lapse: %q", l)
	}
	if code, out, _ := conveyor(t, ts.URL, "status", res.RunID); code != 0 || !strings.Contains(out, `"runner_lost_at": "2026-02-14T08:05:00Z"`) {
		t.Errorf("status after the lapse: exit %d\n%s", code, out)
	}
	stopB := start(b) // takes the run over at 08:05:01
	defer stopB()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if st, err := b.Wait(ctx, res.RunID); err != nil || st.Status != "completed" {
		t.Fatalf("after the takeover: %+v, %v", st, err)
	}
	if l := row(); !strings.Contains(l, " completed ") || !strings.Contains(l, "taken over at 2026-02-14T08:05:01Z") {
		t.Errorf("after the takeover: %q", l)
	}
}
