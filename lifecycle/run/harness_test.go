package run_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
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
	// lastWrite is the real time (UnixNano) of the runners' latest write, so
	// wait moves the fake clock only while they are idle: with a slow store
	// (MinIO) fake time must not race ahead of the work.
	lastWrite *atomic.Int64
}

func newRig(t *testing.T, store storage.Store) *rig {
	t.Helper()
	if store == nil {
		store = memstore.New()
	}
	return &rig{t: t, store: store, clock: clock.NewFake(epoch0), lastWrite: new(atomic.Int64)}
}

// with returns a rig on another store (a wrapper of this one) sharing the
// clock and the idleness tracking.
func (g *rig) with(store storage.Store) *rig {
	return &rig{t: g.t, store: store, clock: g.clock, lastWrite: g.lastWrite}
}

// trackedStore notes the time of every write.
type trackedStore struct {
	storage.Store
	last *atomic.Int64
}

func (s trackedStore) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	s.last.Store(time.Now().UnixNano())
	defer s.last.Store(time.Now().UnixNano())
	return s.Store.Put(ctx, key, v, c)
}

func (s trackedStore) Delete(ctx context.Context, key string, c storage.Condition) error {
	s.last.Store(time.Now().UnixNano())
	defer s.last.Store(time.Now().UnixNano())
	return s.Store.Delete(ctx, key, c)
}

// runner builds a runner on the rig's store and clock, and runs it until the
// test ends (or until the returned stop is called).
func (g *rig) runner(owner string, tweak func(*run.Config), agents ...run.Agent) (*run.Runner, func()) {
	g.t.Helper()
	cfg := run.Config{
		Store: trackedStore{Store: g.store, last: g.lastWrite}, Owner: owner, Clock: g.clock, Node: "test",
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

// wait waits for a run to end or park, advancing the fake clock by step
// whenever the runners are idle, up to limit of fake time. Status reads get
// no deadline: on a loaded machine a MinIO read may take a while.
func (g *rig) wait(r *run.Runner, runID string, step, limit time.Duration) run.Status {
	g.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var advanced time.Duration
	for {
		st, err := r.Status(context.Background(), runID)
		if err == nil && settled(st) {
			return st
		}
		if time.Now().After(deadline) || advanced > limit {
			g.t.Fatalf("run %s did not end: %+v (%v)", runID, st, err)
		}
		time.Sleep(2 * time.Millisecond)
		if time.Since(time.Unix(0, g.lastWrite.Load())) < 15*time.Millisecond {
			continue // the runners are busy; let them work
		}
		if step > 0 {
			g.clock.Advance(step)
			advanced += step
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

// logBuffer collects a runner's JSON log lines, safely for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// capture makes a runner log JSON into the returned buffer.
func capture(c *run.Config) *logBuffer {
	b := &logBuffer{}
	c.Logger = slog.New(slog.NewJSONHandler(b, nil))
	return b
}

// until polls cond (real time) for up to 10 s.
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
