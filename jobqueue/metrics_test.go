package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// counting is a jobqueue.Metrics with every optional method, recording
// each call as a line.
type counting struct {
	mu    sync.Mutex
	calls []string
	in    map[lifecycle.JobState]time.Duration // time in each state, summed
}

func (m *counting) add(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, fmt.Sprintf(format, args...))
}

func (m *counting) JobTransition(t lifecycle.JobType, from, to lifecycle.JobState, in time.Duration) {
	m.add("transition %s %s>%s", t, from, to)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.in == nil {
		m.in = map[lifecycle.JobState]time.Duration{}
	}
	m.in[from] += in
}

func (m *counting) JobFinished(t lifecycle.JobType, outcome lifecycle.JobState, d time.Duration) {
	m.add("finished %s %s %s", t, outcome, d)
}

func (m *counting) AttemptFailed(t lifecycle.JobType, step lifecycle.JobState, code string) {
	m.add("failed %s %s %s", t, step, code)
}

func (m *counting) LeaseLost(t lifecycle.JobType) { m.add("lease_lost %s", t) }
func (m *counting) RecordQuarantined(kind string) { m.add("quarantined %s", kind) }
func (m *counting) HandlerAbandoned(t lifecycle.JobType, step lifecycle.JobState) {
	m.add("abandoned %s %s", t, step)
}

func (m *counting) take() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.calls
	m.calls = nil
	return c
}

func withMetrics(m jobqueue.Metrics) func(*jobqueue.Config) {
	return func(c *jobqueue.Config) { c.Metrics = m }
}

// TestMetricsCompleteJob: a job that completes reports each move once,
// the time it spent in each pipeline state, and its end-to-end time.
func TestMetricsCompleteJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	m := &counting{}
	q := newQueue(t, memstore.New(), clk, withMetrics(m))
	enqueue(t, q, "job-m", "agent-m")
	clk.Advance(3 * time.Second) // waits QUEUED
	h := okHandlers()
	h.AssembleContext = func(ctx context.Context, job lifecycle.Job) (json.RawMessage, error) {
		clk.Advance(2 * time.Second)
		return json.RawMessage(`{}`), nil
	}
	h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
		clk.Advance(7 * time.Second)
		return lifecycle.JobOutput{Content: json.RawMessage(briefContent)}, nil
	}
	if j, err := claim(t, q, "w1").Run(ctx, h); err != nil || j.Status != lifecycle.JobComplete {
		t.Fatalf("run: %+v %v", j, err)
	}
	want := []string{
		"transition BRIEF >PENDING",
		"transition BRIEF PENDING>QUEUED",
		"transition BRIEF QUEUED>CONTEXT_ASSEMBLY",
		"transition BRIEF CONTEXT_ASSEMBLY>NOTEBOOKLM_CALL",
		"transition BRIEF NOTEBOOKLM_CALL>ARTIFACT_WRITE",
		"transition BRIEF ARTIFACT_WRITE>COMPLETE",
		"finished BRIEF COMPLETE 12s",
	}
	if diff := cmp.Diff(want, m.take()); diff != "" {
		t.Fatalf("calls (-want +got):\n%s", diff)
	}
	wantIn := map[lifecycle.JobState]time.Duration{
		"": 0, lifecycle.JobPending: 0, lifecycle.JobQueued: 3 * time.Second,
		lifecycle.JobContextAssembly: 2 * time.Second, lifecycle.JobNotebookLMCall: 7 * time.Second, lifecycle.JobArtifactWrite: 0,
	}
	if diff := cmp.Diff(wantIn, m.in); diff != "" {
		t.Fatalf("time in states (-want +got):\n%s", diff)
	}
}

// TestMetricsRetriesToDead: three failed attempts, two retries, then
// FAILED → DEAD, each reported once.
func TestMetricsRetriesToDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	m := &counting{}
	q := newQueue(t, memstore.New(), clk, withMetrics(m))
	enqueue(t, q, "job-d", "agent-d")
	var calls atomic.Int32
	h := failing(&jobqueue.StatusError{Code: 503}, &calls)
	for _, wait := range jobqueue.DefaultBackoff() {
		if _, err := claim(t, q, "w1").Run(ctx, h); err != nil {
			t.Fatal(err)
		}
		clk.Advance(wait)
	}
	if c := claim(t, q, "w1"); c != nil {
		t.Fatalf("claimed %v", c.Job())
	}
	got := m.take()
	count := func(s string) int {
		return len(slices.DeleteFunc(slices.Clone(got), func(c string) bool { return c != s }))
	}
	for s, n := range map[string]int{
		"failed BRIEF NOTEBOOKLM_CALL UNAVAILABLE": 3,
		"transition BRIEF RETRY_BACKOFF>QUEUED":    2, // the retries
		"transition BRIEF RETRY_BACKOFF>FAILED":    1,
		"transition BRIEF FAILED>DEAD":             1,
		"finished BRIEF DEAD 1m45s":                1, // 15 s + 30 s + 60 s of backoff
	} {
		if c := count(s); c != n {
			t.Errorf("%q reported %d times, want %d; calls:\n%v", s, c, n, got)
		}
	}
}

// TestMetricsLeaseLostAndQuarantine: a rescued orphan counts one lost
// lease, a poison job record one quarantined record.
func TestMetricsLeaseLostAndQuarantine(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	m := &counting{}
	s := memstore.New()
	q := newQueue(t, s, clk, withMetrics(m))
	enqueue(t, q, "job-o", "agent-o")
	_ = claim(t, q, "paused") // never runs: its lease runs out
	clk.Advance(jobqueue.DefaultLeaseTTL + jobqueue.DefaultLeaseTTL/2)
	_ = claim(t, q, "w2")
	enqueue(t, q, "job-bad", "agent-b")
	key, _ := layout.JobKey("job-bad")
	putRaw(t, s, key, "{garbage")
	if _, err := q.Get(context.Background(), "admin", "job-bad"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get of a poison job: %v", err)
	}
	got := m.take()
	for _, s := range []string{"failed BRIEF CONTEXT_ASSEMBLY LEASE_EXPIRED", "lease_lost BRIEF", "quarantined job"} {
		if !slices.Contains(got, s) {
			t.Errorf("no %q in %v", s, got)
		}
	}
}

// TestMetricsHandlerAbandoned: a handler ignoring its context is counted
// when the step timeout abandons it.
func TestMetricsHandlerAbandoned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	m := &counting{}
	q := newQueue(t, memstore.New(), clk, withMetrics(m), func(c *jobqueue.Config) { c.StepTimeout = 5 * time.Second })
	enqueue(t, q, "job-s", "agent-s")
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	c := claim(t, q, "w1")
	done := make(chan error, 1)
	go func() { _, err := c.Run(ctx, stuckHandlers(release, entered, "job-s")); done <- err }()
	within(t, "the stuck handler's start", entered)
	<-clk.WaitForTimers(2) // the step's deadline and the heartbeat
	clk.Advance(5 * time.Second)
	if err := within(t, "Run", done); err != nil {
		t.Fatal(err)
	}
	got := m.take()
	if !slices.Contains(got, "abandoned BRIEF NOTEBOOKLM_CALL") || !slices.Contains(got, "failed BRIEF NOTEBOOKLM_CALL TIMEOUT") {
		t.Fatalf("calls %v", got)
	}
}

// TestDepths: ready work and its age, and retries still waiting, by agent.
func TestDepths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	q := newQueue(t, memstore.New(), clk)
	enqueue(t, q, "job-a1", "agent-a")
	var calls atomic.Int32
	if _, err := claim(t, q, "w1").Run(ctx, failing(errors.New("boom"), &calls)); err != nil { // waits 15 s
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	enqueue(t, q, "job-a2", "agent-a")
	enqueue(t, q, "job-b1", "agent-b")
	clk.Advance(time.Second)
	got, err := q.Depths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []jobqueue.AgentDepth{
		{Agent: "agent-a", Ready: 1, Waiting: 1, Age: time.Second},
		{Agent: "agent-b", Ready: 1, Age: time.Second},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Depths (-want +got):\n%s", diff)
	}
}
