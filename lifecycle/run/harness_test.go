package run_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

var epoch0 = time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC)

// rig is one or more runners over one store, on a fake clock. The runners
// count their work on the clock (activity.Activity), so the rig moves it only
// while every goroutine they started waits on it: never on a guess.
type rig struct {
	t     *testing.T
	store *storage.Store
	clock *clock.Fake
}

func newRig(t *testing.T, store *storage.Store) *rig {
	t.Helper()
	if store == nil {
		store = memstore.New()
	}
	return &rig{t: t, store: store, clock: clock.NewFake(epoch0)}
}

// with returns a rig on another store (a wrapper of this one) sharing the
// clock.
func (g *rig) with(store *storage.Store) *rig {
	return &rig{t: g.t, store: store, clock: g.clock}
}

// tracked returns the rig's store, for a wrapper that holds calls back as
// if its runner's process were paused: such a wrapper waits with
// testWait, so that the calls it holds are no work of the runners and do
// not keep the rig from moving the clock.
func (g *rig) tracked() *storage.Store { return g.store }

// around returns a rig whose runners use s, a wrapper of g.tracked().
func (g *rig) around(s *storage.Store) *rig { return g.with(s) }

// testWait blocks the caller, counted as waiting (not working) when it
// runs for a runner (ctx carries its token), until open is closed: a
// store call or a step the test holds back.
func testWait(ctx context.Context, open <-chan struct{}) {
	defer activity.Wait(ctx, nil, func() bool { return isClosed(open) })()
	<-open
}

// testSelect is testWait until open is closed or ctx ends; it reports
// whether open was.
func testSelect(ctx context.Context, open <-chan struct{}) bool {
	defer activity.Wait(ctx, nil, func() bool { return isClosed(open) || ctx.Err() != nil })()
	select {
	case <-open:
		return true
	case <-ctx.Done():
		return false
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// runner builds a runner on the rig's store and clock, and runs it until the
// test ends (or until the returned stop is called).
func (g *rig) runner(owner string, tweak func(*run.Config), agents ...run.Agent) (*run.Runner, func()) {
	g.t.Helper()
	cfg := run.Config{
		Store: g.store, Owner: owner, Clock: g.clock, Node: "test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	r, err := run.NewRunner(cfg, agents...)
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	rctx := activity.Start(ctx, g.clock) // busy from here, not from when it runs
	go func() {
		defer close(done)
		if err := r.Run(rctx); err != nil {
			g.t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	g.t.Cleanup(stop)
	return r, stop
}

// failAfter bounds, in real time, every wait of the rig: a test that hangs
// fails. It is never a condition for moving on.
const failAfter = 60 * time.Second

// wait waits for a run to end or park, moving the fake clock whenever the
// runners wait on it, by step or straight to the next timer's due time if
// that is later, up to limit of fake time. With step 0 no fake time
// passes. Status reads get no deadline: on a loaded machine a MinIO read
// may take a while.
func (g *rig) wait(r *run.Runner, runID string, step, limit time.Duration) lifecycle.RunStatus {
	g.t.Helper()
	return g.waitFor(r, runID, step, limit, settled)
}

// waitFor is wait until done tells the run's status is the one awaited.
func (g *rig) waitFor(r *run.Runner, runID string, step, limit time.Duration, done func(lifecycle.RunStatus) bool) lifecycle.RunStatus {
	g.t.Helper()
	var (
		st  lifecycle.RunStatus
		err error
	)
	g.advanceUntil(step, limit, func() bool {
		st, err = r.Status(context.Background(), runID)
		return err == nil && done(st)
	}, func() string { return fmt.Sprintf("run %s did not end: %+v (%v)", runID, st, err) })
	return st
}

// advanceUntil moves the fake clock, whenever the runners are idle, by
// step or straight to the next timer's due time if that is later, until
// cond holds; it fails the test past limit of fake time (or failAfter of
// real time). With step 0 no fake time passes: it waits for the runners'
// work alone.
func (g *rig) advanceUntil(step, limit time.Duration, cond func() bool, what func() string) {
	g.t.Helper()
	deadline := time.Now().Add(failAfter)
	start := g.clock.Now()
	act := activity.Of(g.clock)
	for {
		idle, changed := act.Idle()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s (after %v of fake time)", what(), g.clock.Now().Sub(start))
		}
		if !idle || step <= 0 {
			// Look again at the runners' next move; the re-read every
			// 50 ms covers writers outside the runners (a test's own
			// goroutine, a Runner built by hand over g.store).
			select {
			case <-changed:
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		now := g.clock.Now()
		d := step
		if next, ok := g.clock.Next(); ok && next.Sub(now) > d {
			d = next.Sub(now) // nothing is due before: skip the dead time
		}
		if now.Add(d).Sub(start) > limit {
			g.t.Fatalf("%s within %v of fake time", what(), limit)
		}
		g.clock.Advance(d)
	}
}

// idle waits until the runners are idle (every goroutine they started
// waits on the clock or for the test), and fails the test when they are
// not within failAfter.
func (g *rig) idle() {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if err := g.clock.WaitIdle(ctx); err != nil {
		g.t.Fatalf("the runners never went idle (%d timers pending)", g.clock.Pending())
	}
}

// timers waits (real time, at most 10 s) until at least n timers of the
// fake clock are scheduled: the code under test is waiting on the clock
// again. No sleeps: the clock's WaitForTimers says when.
func (g *rig) timers(n int) {
	g.t.Helper()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-g.clock.WaitForTimers(n):
	case <-t.C:
		g.t.Fatalf("%d timers pending, want %d", g.clock.Pending(), n)
	}
}

// tick advances the fake clock by d, then waits until n timers are
// scheduled again: whatever fired has been handled (a fired poll timer is
// replaced only after its pass).
func (g *rig) tick(d time.Duration, n int) {
	g.t.Helper()
	g.clock.Advance(d)
	g.timers(n)
}

// settled tells whether a run ended, or parked waiting for an approval or
// an external event.
func settled(st lifecycle.RunStatus) bool {
	switch st.Status {
	case "completed", "failed", "succeeded", "canceled", "cancelled", "timeout":
		return true
	case "awaiting_approval", "waiting_external":
		return st.Lease == nil
	}
	return false
}

// capture makes a runner log JSON into the returned buffer.
func capture(c *run.Config) *testlog.Buffer {
	b := &testlog.Buffer{}
	c.Logger = slog.New(slog.NewJSONHandler(b, nil))
	return b
}

// until polls cond (real time) for up to 10 s. It is for waits with no
// clock event to wait on: a write that follows another in the same
// goroutine (an audit event after its status, cleanup after the final
// status), a process outside the test, a goroutine that returns when the
// test releases it. A wait for something the clock triggers uses the
// clock instead (wait, advanceUntil, timers, tick).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func okStep(name string) run.Step {
	return run.Step{Name: name, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: name + " done", Data: json.RawMessage(`{"step":"` + name + `"}`)}, nil
	}}
}

func readJSON(t *testing.T, s *storage.Store, key string, v any) {
	t.Helper()
	b, _, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", key, err)
	}
}

// manifestDoc is the part of manifest.json the tests read.
type manifestDoc struct {
	Status  string            `json:"status"`
	Steps   []json.RawMessage `json:"steps"`
	Outputs []string          `json:"outputs"`
	Epoch   int64             `json:"epoch"`
}
