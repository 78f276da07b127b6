package run_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// A run whose runner stopped heartbeating reads as lost once its lease
// lapses by the reader's clock (runner_lost_at, never stored), and as
// taken over (taken_over_at, stored by the claim) once another runner
// resumes it (docs/spec.md#run-status).
func TestLostRunnerIsVisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := newRig(t, nil)
	const slug = "orphan-seen"
	inA := make(chan struct{}, 1)
	never := make(chan struct{})
	b := newBlocker()
	mk := func(owner string) run.Agent {
		work := run.Step{Name: "work", Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			inA <- struct{}{}
			testSelect(ctx, never) // runner a's step: it ends only with its runner
			return run.StepOutput{}, ctx.Err()
		}}
		if owner == "b" {
			work = b.step("work")
			work.Idempotent = true
		}
		return run.Agent{Slug: slug, Steps: []run.Step{work, okStep("after")}}
	}
	a, stopA := g.runner("a", nil, mk("a"))
	id := submit(t, a, slug)
	<-inA
	stopA() // runner a is lost mid-step: no heartbeat, its lease stays behind
	st := status(t, a, id)
	if st.Status != "running" || st.Lease == nil || st.Lease.Owner != "a" {
		t.Fatalf("after losing a: %+v", st)
	}
	expiry := st.Lease.ExpiresAt

	tests := []struct {
		name     string
		at       time.Time // the reader's clock
		wantLost bool
	}{
		{"lease-live", g.clock.Now(), false},
		{"at-expiry", expiry, false}, // a claim still refuses it
		{"lapsed", expiry.Add(time.Second), true},
		{"long-lapsed", expiry.Add(time.Hour), true},
	}
	for _, tt := range tests { // in order: the clock only moves forward
		g.clock.Advance(tt.at.Sub(g.clock.Now()))
		st := status(t, a, id)
		runs, err := a.Runs(ctx, slug)
		if err != nil || len(runs) != 1 {
			t.Fatalf("%s: runs %v, %v", tt.name, runs, err)
		}
		for _, got := range []lifecycle.RunStatus{st, runs[0]} {
			lost := got.RunnerLostAt != nil
			if lost != tt.wantLost || (lost && !got.RunnerLostAt.Equal(expiry)) || got.TakenOverAt != nil || got.Status != "running" {
				t.Errorf("%s: runner lost at %v, taken over at %v, status %s; want lost %v (at %v)",
					tt.name, got.RunnerLostAt, got.TakenOverAt, got.Status, tt.wantLost, expiry)
			}
		}
	}
	key, err := layout.RunStatusKey(slug, id)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() string {
		t.Helper()
		raw, _, err := g.store.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	if s := stored(); strings.Contains(s, "runner_lost_at") || strings.Contains(s, "taken_over_at") {
		t.Fatalf("stored before the takeover: %s", s)
	}

	// Runner b takes the run over: from its claim on, reads say when.
	before := g.clock.Now()
	rb, _ := g.runner("b", nil, mk("b"))
	st = g.waitFor(rb, id, 30*time.Second, 10*time.Minute, func(s lifecycle.RunStatus) bool { return s.TakenOverAt != nil })
	if st.Status != "running" || st.RunnerLostAt != nil || st.ResumeCount != 1 || st.TakenOverAt.Before(before) || st.Lease.Owner != "b" {
		t.Fatalf("after the takeover: %s, lost %v, taken over %v (not before %v), resumed %d, lease %+v",
			st.Status, st.RunnerLostAt, st.TakenOverAt, before, st.ResumeCount, st.Lease)
	}
	takenOver := *st.TakenOverAt
	if lost := status(t, a, id).RunnerLostAt; lost != nil {
		t.Errorf("runner a's reader says lost at %v after b's claim", lost)
	}
	close(b.release)
	st = g.wait(rb, id, 30*time.Second, 10*time.Minute)
	if st.Status != "completed" || st.RunnerLostAt != nil || st.TakenOverAt == nil || !st.TakenOverAt.Equal(takenOver) {
		t.Fatalf("finished: %s, lost %v, taken over %v (want %v)", st.Status, st.RunnerLostAt, st.TakenOverAt, takenOver)
	}
	if s := stored(); strings.Contains(s, "runner_lost_at") || !strings.Contains(s, `"taken_over_at":"`+takenOver.Format(time.RFC3339Nano)+`"`) {
		t.Fatalf("stored after the takeover: %s", s)
	}
}
