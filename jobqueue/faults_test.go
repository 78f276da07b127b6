package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/faultstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// The fault suite of issue 10 for jobs: each test names the fault it
// proves handled. A bound on real time only ever fails a test (code that
// hangs), it never lets one pass.
const hangLimit = 20 * time.Second

func within[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangLimit):
		t.Fatalf("%s: still blocked after %s", what, hangLimit)
		panic("unreachable")
	}
}

// stuckHandlers never return from NOTEBOOKLM_CALL for job ids in stuck,
// whatever their context says, until release is closed; entered is closed
// when the first stuck call begins.
func stuckHandlers(release <-chan struct{}, entered chan<- struct{}, stuck ...string) jobqueue.Handlers {
	h := okHandlers()
	ok := h.CallNotebookLM
	var once sync.Once
	h.CallNotebookLM = func(ctx context.Context, job jobqueue.Job, snap json.RawMessage) (jobqueue.Output, error) {
		for _, id := range stuck {
			if job.JobID == id {
				if entered != nil {
					once.Do(func() { close(entered) })
				}
				<-release
				return jobqueue.Output{}, errors.New("returned after release")
			}
		}
		return ok(ctx, job, snap)
	}
	return h
}

// Fault 1: a handler that ignores its ctx held its job, its agent and its
// slot forever (the heartbeat kept renewing), StepTimeout had no effect,
// and stopping the Worker hung.
func TestFaultHandlerIgnoringContextIsAbandonedAtStepTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := memstore.New()
	q := newQueue(t, s, clk)
	enqueue(t, q, "job-1-stuck", "agent-a")
	enqueue(t, q, "job-2-next", "agent-a")
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	c := claim(t, q, "w1")
	done := make(chan error, 1)
	go func() { _, err := c.Run(ctx, stuckHandlers(release, entered, "job-1-stuck")); done <- err }()
	within(t, "the stuck handler's start", entered)
	// The heartbeat (every LeaseTTL/3 = 10 s) keeps the lease; the step
	// timeout (120 s from the handler's start) must end the attempt all the
	// same.
	for range 11 {
		<-clk.WaitForTimers(2) // the step's deadline and the next beat
		clk.Advance(10 * time.Second)
	}
	<-clk.WaitForTimers(2)
	clk.Advance(10 * time.Second)
	if err := within(t, "Claim.Run with a handler ignoring ctx", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	j := get(t, q, "job-1-stuck")
	if j.Status != jobqueue.JobRetryBackoff || j.ErrorCode != jobqueue.CodeTimeout || j.Lease != nil {
		t.Fatalf("stuck job after StepTimeout: %s code %q lease %v; want RETRY_BACKOFF, TIMEOUT, no lease", j.Status, j.ErrorCode, j.Lease)
	}
	if live, total := q.Stragglers(); live != 1 || total != 1 {
		t.Fatalf("Stragglers() = %d live, %d total; want the abandoned handler counted", live, total)
	}
	// The agent is free: its next job runs.
	c2 := claim(t, q, "w2")
	if c2 == nil || c2.Job().JobID != "job-2-next" {
		t.Fatalf("agent still held after the stuck handler was abandoned: claim %v", c2)
	}
	if _, err := c2.Run(ctx, okHandlers()); err != nil {
		t.Fatal(err)
	}
	if j := get(t, q, "job-2-next"); j.Status != jobqueue.JobComplete {
		t.Fatalf("next job %s", j.Status)
	}
}

// Fault 1, shutdown: stopping a Worker whose handler ignores ctx hung.
func TestFaultWorkerStopsWithinGraceDespiteStuckHandler(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	q := newQueue(t, s, clock.Real(), func(c *jobqueue.Config) { c.StopGrace = 200 * time.Millisecond })
	enqueue(t, q, "job-1-stuck", "agent-a")
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	h := stuckHandlers(release, entered, "job-1-stuck")
	ctx, cancel := context.WithCancel(context.Background())
	w := &jobqueue.Worker{Queue: q, ID: "w1", Handlers: h, SweepInterval: -1, PollInterval: 10 * time.Millisecond}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	within(t, "the stuck handler's start", entered)
	cancel()
	begun := time.Now()
	if err := within(t, "Worker.Run after cancel", stopped); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begun); took > 5*time.Second {
		t.Fatalf("Worker took %s to stop with StopGrace 200ms", took)
	}
	if j := get(t, q, "job-1-stuck"); j.Status != jobqueue.JobRetryBackoff || j.Lease != nil {
		t.Fatalf("job after shutdown: %s, lease %v; want the attempt recorded as failed", j.Status, j.Lease)
	}
}

func putRaw(t *testing.T, s storage.Store, key, body string) {
	t.Helper()
	if _, err := s.Put(context.Background(), key, []byte(body), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
}

func quarantined(t *testing.T, s storage.Store) map[string]string {
	t.Helper()
	got := map[string]string{}
	for rec, err := range storage.ListQuarantine(context.Background(), s) {
		if err != nil {
			t.Fatal(err)
		}
		got[rec.Key] = string(rec.Data)
	}
	return got
}

// Fault 2: one unreadable job record blocked its agent's queue forever.
func TestFaultCorruptJobRecordIsQuarantinedNotBlocking(t *testing.T) {
	for _, junk := range []string{"{garbage", `{"job_id":"job-bad","status":"SIDEWAYS","agent_slug":"agent-a"}`, `{"job_id":"someone-else","status":"QUEUED","agent_slug":"agent-a"}`} {
		t.Run(junk, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			s := memstore.New()
			q := newQueue(t, s, clk)
			enqueue(t, q, "job-bad", "agent-a")
			enqueue(t, q, "job-good", "agent-a")
			key, _ := storage.JobKey("job-bad")
			putRaw(t, s, key, junk)
			var c *jobqueue.Claim
			for range 3 {
				if c, _ = q.Claim(ctx, "w1"); c != nil {
					break
				}
			}
			if c == nil || c.Job().JobID != "job-good" {
				t.Fatalf("claim behind a corrupt job: %v", c)
			}
			if got := quarantined(t, s); got[key] != junk {
				t.Fatalf("quarantine holds %v, want %s with its bytes", got, key)
			}
			if _, err := q.Get(ctx, lifecycle.ActorAdmin, "job-bad"); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("Get of the quarantined job: %v, want ErrNotFound", err)
			}
		})
	}
}

// Fault 2: a junk agent lock object stopped its agent for good.
func TestFaultCorruptAgentLockIsQuarantinedNotBlocking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	q := newQueue(t, s, clock.NewFake(t0))
	enqueue(t, q, "job-1", "agent-a")
	lockKey, _ := jobqueue.AgentLockKey("agent-a")
	putRaw(t, s, lockKey, "\x00\x01 not a lock")
	// A fresh Queue (another process) that has no cached copy of the lock.
	q2 := newQueue(t, s, clock.NewFake(t0))
	var c *jobqueue.Claim
	for range 3 {
		if c, _ = q2.Claim(ctx, "w1"); c != nil {
			break
		}
	}
	if c == nil || c.Job().JobID != "job-1" {
		t.Fatalf("claim behind a junk agent lock: %v", c)
	}
	if _, ok := quarantined(t, s)[lockKey]; !ok {
		t.Fatal("junk lock not quarantined")
	}
}

// Fault 2: one corrupt job record stopped the cluster-wide sweep for good;
// junk in the sweep's lease object disabled the sweep.
func TestFaultSweepGoesOnPastPoison(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := memstore.New()
	q := newQueue(t, s, clk)
	enqueue(t, q, "job-a", "agent-a") // sorts before the corrupt one
	enqueue(t, q, "job-b", "agent-b")
	enqueue(t, q, "job-z", "agent-z")
	for _, id := range []string{"job-a", "job-z"} { // two orphans: claimed, then the worker dies
		c := claim(t, q, "w-dead")
		if c == nil {
			t.Fatal("no claim")
		}
		_ = id
	}
	key, _ := storage.JobKey("job-b")
	putRaw(t, s, key, "{garbage")
	putRaw(t, s, "jobs/sweep/lease.json", "junk")
	clk.Advance(time.Hour) // every lease lapsed
	r, swept, err := q.SweepIfDue(ctx, "sweeper", time.Minute)
	if err != nil || !swept {
		t.Fatalf("SweepIfDue with a junk lease and a corrupt job: swept %v, %v", swept, err)
	}
	if r.Rescued != 2 || r.Quarantined != 1 {
		t.Fatalf("sweep report %+v; want both orphans rescued and the corrupt job quarantined", r)
	}
	got := quarantined(t, s)
	if got[key] != "{garbage" || got["jobs/sweep/lease.json"] != "junk" {
		t.Fatalf("quarantine holds %v", got)
	}
}

// Fault 5: a store outage shorter than the unit's deadline fails nothing:
// the claim's writes wait the outage out.
func TestFaultOutageDuringAJobIsWaitedOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	fs := faultstore.New(memstore.New())
	// Leases and steps far longer than the outage: the test moves time in
	// 100 ms steps while retries wait, and no lease may lapse meanwhile.
	q := newQueue(t, fs, clk, func(c *jobqueue.Config) { c.LeaseTTL, c.StepTimeout = time.Hour, time.Hour })
	enqueue(t, q, "job-1", "agent-a")
	c := claim(t, q, "w1")
	h := okHandlers()
	call := h.CallNotebookLM
	downed := make(chan struct{})
	h.CallNotebookLM = func(ctx context.Context, job jobqueue.Job, snap json.RawMessage) (jobqueue.Output, error) {
		fs.Down() // the store stops while the NLM backend answers
		close(downed)
		return call(ctx, job, snap)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Run(ctx, h); done <- err }()
	within(t, "the outage's start", downed)
	for fs.Failed() < 5 {
		select {
		// The heartbeat (an hour away) and the failed write's retry: time
		// moves only while the write waits, so it moves no further than
		// the retries' intervals add up to.
		case <-clk.WaitForTimers(2):
		case err := <-done:
			t.Fatalf("Run returned during the outage after %d refused calls: %v", fs.Failed(), err)
		}
		clk.Advance(100 * time.Millisecond)
	}
	<-clk.WaitForTimers(2) // the heartbeat (an hour away) and the write's next retry
	fs.Up()
	clk.Advance(2 * time.Second) // the longest retry interval
	if err := within(t, "Run after the store came back", done); err != nil {
		t.Fatalf("Run across an outage: %v", err)
	}
	if j := get(t, q, "job-1"); j.Status != jobqueue.JobComplete || j.Attempt != 1 {
		t.Fatalf("job after the outage: %s attempt %d; want COMPLETE on its first attempt", j.Status, j.Attempt)
	}
}
