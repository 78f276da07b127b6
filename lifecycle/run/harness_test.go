package run_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testlog"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

var epoch0 = time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC)

// rig is one or more runners over one store, on a fake clock.
type rig struct {
	t     *testing.T
	store storage.Store
	clock *clock.Fake
	// act tracks the runners' store calls, so the rig moves the fake clock
	// only while they wait on it: with a slow store (MinIO) fake time must
	// not race ahead of the work.
	act *activity
	// reporting says store already reports to act (see around).
	reporting bool
}

func newRig(t *testing.T, store storage.Store) *rig {
	t.Helper()
	if store == nil {
		store = memstore.New()
	}
	return &rig{t: t, store: store, clock: clock.NewFake(epoch0), act: newActivity()}
}

// with returns a rig on another store (a wrapper of this one) sharing the
// clock and the activity tracking.
func (g *rig) with(store storage.Store) *rig {
	return &rig{t: g.t, store: store, clock: g.clock, act: g.act}
}

// tracked returns the rig's store with its calls reported to the rig. A
// wrapper that holds calls back, as if its runner's process were paused,
// wraps this and joins through around: the calls it holds are no work of
// the runners, and must not keep the rig from moving the clock.
func (g *rig) tracked() storage.Store { return trackedStore{Store: g.store, act: g.act} }

// around returns a rig whose runners use s, a wrapper of g.tracked(), as
// it is, sharing the clock and the activity tracking.
func (g *rig) around(s storage.Store) *rig {
	return &rig{t: g.t, store: s, clock: g.clock, act: g.act, reporting: true}
}

// activity counts the runners' store calls in flight and signals each
// call's start and end, and each completed write.
type activity struct {
	mu       sync.Mutex
	inFlight int
	changed  chan struct{} // closed at the next call's start or end
	wrote    chan struct{} // closed at the end of the next Put or Delete
}

func newActivity() *activity {
	return &activity{changed: make(chan struct{}), wrote: make(chan struct{})}
}

func (a *activity) begin() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inFlight++
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *activity) end(write bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inFlight--
	close(a.changed)
	a.changed = make(chan struct{})
	if write {
		close(a.wrote)
		a.wrote = make(chan struct{})
	}
}

// state returns the calls in flight and the channel closed at the next
// call's start or end.
func (a *activity) state() (int, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inFlight, a.changed
}

// nextWrite returns a channel closed once the next write ends.
func (a *activity) nextWrite() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wrote
}

// trackedStore reports every call to the rig's activity.
type trackedStore struct {
	storage.Store
	act *activity
}

func (s trackedStore) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	s.act.begin()
	defer s.act.end(false)
	return s.Store.Get(ctx, key)
}

func (s trackedStore) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	s.act.begin()
	defer s.act.end(true)
	return s.Store.Put(ctx, key, v, c)
}

func (s trackedStore) Delete(ctx context.Context, key string, c storage.Condition) error {
	s.act.begin()
	defer s.act.end(true)
	return s.Store.Delete(ctx, key, c)
}

func (s trackedStore) List(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		s.act.begin()
		defer s.act.end(false)
		for k, err := range s.Store.List(ctx, prefix) {
			if !yield(k, err) {
				return
			}
		}
	}
}

// runner builds a runner on the rig's store and clock, and runs it until the
// test ends (or until the returned stop is called).
func (g *rig) runner(owner string, tweak func(*run.Config), agents ...run.Agent) (*run.Runner, func()) {
	g.t.Helper()
	store := g.store
	if !g.reporting {
		store = g.tracked()
	}
	cfg := run.Config{
		Store: store, Owner: owner, Clock: g.clock, Node: "test",
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
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
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

// quietFor is how long the runners' store must go without a call, and with
// none in flight, before the rig counts the runners as waiting on the fake
// clock. Nothing tells when every goroutine of a runner is blocked (a step
// that returned, a pass between two store calls), so this short quiet
// spell, together with a pending timer, stands for it.
const quietFor = 10 * time.Millisecond

// wait waits for a run to end or park, moving the fake clock whenever the
// runners wait on it, by step or straight to the next timer's due time if
// that is later, up to limit of fake time. With step 0 no fake time
// passes. Status reads get no deadline: on a loaded machine a MinIO read
// may take a while.
func (g *rig) wait(r *run.Runner, runID string, step, limit time.Duration) run.Status {
	g.t.Helper()
	return g.waitFor(r, runID, step, limit, settled)
}

// waitFor is wait until done tells the run's status is the one awaited.
func (g *rig) waitFor(r *run.Runner, runID string, step, limit time.Duration, done func(run.Status) bool) run.Status {
	g.t.Helper()
	var (
		st  run.Status
		err error
	)
	g.advanceUntil(step, limit, func() bool {
		st, err = r.Status(context.Background(), runID)
		return err == nil && done(st)
	}, func() string { return fmt.Sprintf("run %s did not end: %+v (%v)", runID, st, err) })
	return st
}

// advanceUntil moves the fake clock, whenever the runners wait on it, by
// step or straight to the next timer's due time if that is later, until
// cond holds; it fails the test past limit of fake time (or failAfter of
// real time). With step 0 no fake time passes: it waits for the runners'
// work alone.
func (g *rig) advanceUntil(step, limit time.Duration, cond func() bool, what func() string) {
	g.t.Helper()
	deadline := time.Now().Add(failAfter)
	start := g.clock.Now()
	for {
		wrote := g.act.nextWrite()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s (after %v of fake time)", what(), g.clock.Now().Sub(start))
		}
		if step <= 0 {
			// No time passes: the run moves on by its steps and store calls
			// alone, with no clock event to wait on; look again after the
			// next write. The re-read every 50 ms covers writers outside the
			// rig (a Runner built by hand over g.store).
			select {
			case <-wrote:
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if !g.settle(deadline) {
			g.t.Fatalf("%s: the runners never waited on the clock (%d timers pending)", what(), g.clock.Pending())
		}
		if cond() {
			return
		}
		now := g.clock.Now()
		d := step
		if next, ok := g.clock.Next(); ok && next.Sub(now) > d {
			// Nothing is due before: skip the dead time. But on a loaded
			// machine the short quiet spell can fall in the middle of a
			// runner's work, before it set its next timer (a backoff, the
			// poll), which the skip would then jump past: the skip waits
			// for a long quiet spell first and looks again.
			if !g.settleFor(deadline, skipQuiet) {
				g.t.Fatalf("%s: the runners never waited on the clock (%d timers pending)", what(), g.clock.Pending())
			}
			if cond() {
				return
			}
			if next, ok := g.clock.Next(); ok && next.Sub(now) > d {
				d = next.Sub(now)
			}
		}
		if now.Add(d).Sub(start) > limit {
			g.t.Fatalf("%s within %v of fake time", what(), limit)
		}
		g.clock.Advance(d)
	}
}

// idle waits until the runners wait on the fake clock (see settle), and
// fails the test when they do not within failAfter.
func (g *rig) idle() {
	g.t.Helper()
	if !g.settle(time.Now().Add(failAfter)) {
		g.t.Fatalf("the runners never waited on the clock (%d timers pending)", g.clock.Pending())
	}
}

// settle waits until the runners wait on the fake clock: a timer is
// pending and their store has been quiet for quietFor. It reports false
// when that did not happen by deadline.
func (g *rig) settle(deadline time.Time) bool {
	return g.settleFor(deadline, quietFor)
}

// skipQuiet is the quiet spell advanceUntil waits for before it moves the
// clock past more than its step (to the next timer).
const skipQuiet = 100 * time.Millisecond

// settleFor is settle with a quiet spell of quiet.
func (g *rig) settleFor(deadline time.Time, quietSpell time.Duration) bool {
	fail := time.NewTimer(time.Until(deadline))
	defer fail.Stop()
	for {
		select {
		case <-g.clock.WaitForTimers(1):
		case <-fail.C:
			return false
		}
		n, changed := g.act.state()
		if n > 0 {
			select {
			case <-changed:
				continue
			case <-fail.C:
				return false
			}
		}
		quiet := time.NewTimer(quietSpell)
		select {
		case <-changed:
			quiet.Stop()
			continue
		case <-fail.C:
			quiet.Stop()
			return false
		case <-quiet.C:
			if g.clock.Pending() > 0 {
				return true
			}
		}
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
func settled(st run.Status) bool {
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

func readJSON(t *testing.T, s storage.Store, key string, v any) {
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
