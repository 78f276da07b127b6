package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// The fault suite of issue 10 for jobs: each test names the fault it
// proves handled, and runs on memstore and filestore, and on MinIO where
// the fault is about S3 (poison records and their quarantine, late
// writes). A bound on real time only ever fails a test (code that
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
	h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
		for _, id := range stuck {
			if job.JobID == id {
				if entered != nil {
					once.Do(func() { close(entered) })
				}
				<-release
				return lifecycle.JobOutput{}, errors.New("returned after release")
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
	forFaultStores(t, false, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
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
		if j.Status != lifecycle.JobRetryBackoff || j.ErrorCode != codes.JobTimeout || j.Lease != nil {
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
		if j := get(t, q, "job-2-next"); j.Status != lifecycle.JobComplete {
			t.Fatalf("next job %s", j.Status)
		}
	})
}

// Fault 1, shutdown: stopping a Worker whose handler ignores ctx hung.
func TestFaultWorkerStopsWithinGraceDespiteStuckHandler(t *testing.T) {
	forFaultStores(t, false, func(t *testing.T, s *storage.Store) {
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
		if j := get(t, q, "job-1-stuck"); j.Status != lifecycle.JobRetryBackoff || j.Lease != nil {
			t.Fatalf("job after shutdown: %s, lease %v; want the attempt recorded as failed", j.Status, j.Lease)
		}
	})
}

func putRaw(t *testing.T, s *storage.Store, key, body string) {
	t.Helper()
	if _, err := s.Put(context.Background(), key, []byte(body), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
}

func quarantined(t *testing.T, s *storage.Store) map[string]string {
	t.Helper()
	got := map[string]string{}
	for rec, err := range records.ListQuarantine(context.Background(), s) {
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
			forFaultStores(t, true, func(t *testing.T, s *storage.Store) {
				ctx := context.Background()
				clk := clock.NewFake(t0)
				q := newQueue(t, s, clk)
				enqueue(t, q, "job-bad", "agent-a")
				enqueue(t, q, "job-good", "agent-a")
				key, _ := layout.JobKey("job-bad")
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
				// Issue 18 defect 7: read again later, the job was plain
				// NOT_FOUND; it is RECORD_QUARANTINED as a run is.
				for _, q := range []*jobqueue.Queue{q, newQueue(t, s, clk)} {
					_, err := q.Get(ctx, lifecycle.ActorAdmin, "job-bad")
					var qe *lifecycle.QuarantinedError
					if !errors.Is(err, storage.ErrNotFound) || !errors.As(err, &qe) || qe.ID != "job-bad" ||
						lifecycle.ErrorCode(err) != codes.RecordQuarantined {
						t.Fatalf("Get of the quarantined job: %v (code %s), want a *QuarantinedError", err, lifecycle.ErrorCode(err))
					}
					if _, err := q.Requeue(ctx, lifecycle.ActorAdmin, "job-bad"); lifecycle.ErrorCode(err) != codes.RecordQuarantined {
						t.Fatalf("Requeue of the quarantined job: %v, want RECORD_QUARANTINED", err)
					}
				}
			})
		})
	}
}

// Fault 2: a junk agent lock object stopped its agent for good.
func TestFaultCorruptAgentLockIsQuarantinedNotBlocking(t *testing.T) {
	forFaultStores(t, true, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		q := newQueue(t, s, clock.NewFake(t0))
		enqueue(t, q, "job-1", "agent-a")
		lockKey, _ := layout.AgentLockKey("agent-a")
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
	})
}

// Fault 2: one corrupt job record stopped the cluster-wide sweep for good;
// junk in the sweep's lease object disabled the sweep.
func TestFaultSweepGoesOnPastPoison(t *testing.T) {
	forFaultStores(t, true, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
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
		key, _ := layout.JobKey("job-b")
		putRaw(t, s, key, "{garbage")
		putRaw(t, s, layout.SweepLeaseKey, "junk")
		clk.Advance(time.Hour) // every lease lapsed
		r, swept, err := q.SweepIfDue(ctx, "sweeper", time.Minute)
		if err != nil || !swept {
			t.Fatalf("SweepIfDue with a junk lease and a corrupt job: swept %v, %v", swept, err)
		}
		if r.Rescued != 2 || r.Quarantined != 1 {
			t.Fatalf("sweep report %+v; want both orphans rescued and the corrupt job quarantined", r)
		}
		got := quarantined(t, s)
		if got[key] != "{garbage" || got[layout.SweepLeaseKey] != "junk" {
			t.Fatalf("quarantine holds %v", got)
		}
	})
}

// Fault 5: a store outage shorter than the unit's deadline fails nothing:
// the claim's writes wait the outage out.
func TestFaultOutageDuringAJobIsWaitedOut(t *testing.T) {
	forFaultStores(t, false, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		fs := faultstore.New(s)
		// Leases and steps far longer than the outage: the test moves time in
		// 100 ms steps while retries wait, and no lease may lapse meanwhile.
		q := newQueue(t, storage.New(fs), clk, func(c *jobqueue.Config) { c.LeaseTTL, c.StepTimeout = time.Hour, time.Hour })
		enqueue(t, q, "job-1", "agent-a")
		c := claim(t, q, "w1")
		h := okHandlers()
		call := h.CallNotebookLM
		downed := make(chan struct{})
		h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
			fs.Down() // the store stops while the NLM backend answers
			close(downed)
			return call(ctx, job, snap)
		}
		done := make(chan error, 1)
		go func() { _, err := c.Run(ctx, h); done <- err }()
		within(t, "the outage's start", downed)
		// The first write after the NLM call is the artifact's (issue 12:
		// ARTIFACT_WRITE is no write of its own), made inside the artifact
		// step: its timers are the heartbeat, the step's deadline (both an
		// hour away) and the failed write's retry. Where the store commits
		// it is the end's commit (artifact, record, audit object), made
		// after the step: no step deadline.
		timers := 3
		if storage.New(fs).CanCommit() {
			timers = 2
		}
		for fs.Failed() < 5 {
			select {
			// Time moves only while the write waits, so it moves no further
			// than the retries' intervals add up to.
			case <-clk.WaitForTimers(timers):
			case err := <-done:
				t.Fatalf("Run returned during the outage after %d refused calls: %v", fs.Failed(), err)
			}
			// And only once the write waits again: a retry that fired but
			// has not yet made its call leaves other timers armed, and a
			// loop moving the clock meanwhile ran it past the heartbeat,
			// which then waited for the claim the write holds (a hang
			// under load).
			idleCtx, cancel := context.WithTimeout(ctx, hangLimit)
			if err := clk.WaitIdle(idleCtx); err != nil {
				t.Fatalf("the claim never waited again after %d refused calls: %v", fs.Failed(), err)
			}
			cancel()
			clk.Advance(100 * time.Millisecond)
		}
		<-clk.WaitForTimers(timers) // the heartbeat, (the step's deadline) and the write's next retry
		fs.Up()
		clk.Advance(2 * time.Second) // the longest retry interval
		if err := within(t, "Run after the store came back", done); err != nil {
			t.Fatalf("Run across an outage: %v", err)
		}
		if j := get(t, q, "job-1"); j.Status != lifecycle.JobComplete || j.Attempt != 1 {
			t.Fatalf("job after the outage: %s attempt %d; want COMPLETE on its first attempt", j.Status, j.Attempt)
		}
	})
}

// freezer is one process's view of a shared store that can be frozen the
// way SIGSTOP freezes a process: once a trigger matches a Put (before it
// is made, or after it returned), that call and every later call through
// this view block until thaw. The heartbeat of a frozen worker is frozen
// with it, so its lease runs out.
type freezer struct {
	driver.Store
	mu            sync.Mutex
	before, after func(key string, val []byte) bool
	frozen        bool
	stopped       chan struct{} // closed when frozen
	thawed        chan struct{} // closed by thaw
	thawOnce      sync.Once
}

func newFreezer(s *storage.Store) *freezer {
	return &freezer{Store: s, stopped: make(chan struct{}), thawed: make(chan struct{})}
}

// arm sets the triggers; nil never matches.
func (f *freezer) arm(before, after func(key string, val []byte) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.before, f.after = before, after
}

// freeze freezes the view now (a handler freezing its own process).
func (f *freezer) freeze() { f.trip(func(string, []byte) bool { return true }, "", nil) }

func (f *freezer) thaw() { f.thawOnce.Do(func() { close(f.thawed) }) }

func (f *freezer) trip(match func(string, []byte) bool, key string, val []byte) {
	f.mu.Lock()
	if !f.frozen && match != nil && match(key, val) {
		f.frozen = true
		close(f.stopped)
	}
	f.mu.Unlock()
}

func (f *freezer) wait() {
	f.mu.Lock()
	frozen := f.frozen
	f.mu.Unlock()
	if frozen {
		<-f.thawed
	}
}

func (f *freezer) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	f.wait()
	return f.Store.Get(ctx, key)
}

func (f *freezer) Put(ctx context.Context, key string, val []byte, cond storage.Condition) (storage.Version, error) {
	f.wait()
	f.mu.Lock()
	before, after := f.before, f.after
	f.mu.Unlock()
	f.trip(before, key, val)
	f.wait()
	v, err := f.Store.Put(ctx, key, val, cond)
	if err == nil {
		f.trip(after, key, val)
	}
	f.wait()
	return v, err
}

func (f *freezer) Delete(ctx context.Context, key string, cond storage.Condition) error {
	f.wait()
	return f.Store.Delete(ctx, key, cond)
}

func (f *freezer) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	f.wait()
	return f.Store.ListAfter(ctx, prefix, after)
}

// producedBy are handlers whose artifact names the worker that produced it
// (its title), so a test can tell whose attempt an artifact is.
func producedBy(worker string) jobqueue.Handlers {
	h := okHandlers()
	h.CallNotebookLM = func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"` + worker + `","body":"b","entity_map":{},"word_count":1}`)}, nil
	}
	return h
}

// Fault 3/B (found by examples/chaos on MinIO): ARTIFACT_WRITE created the
// job's artifact create-only but unfenced by the lease, so a worker paused
// past its lease woke, created the artifact after another worker had
// rescued the job, and attempt 2 completed pointing at the lost attempt's
// artifact. Worker 1 (its own view of the store, frozen as by SIGSTOP) is
// paused at three points; worker 2 rescues the job and completes it, and
// worker 1 wakes before attempt 2 or after it completed.
//
// On the old code the rows paused before the artifact write and
// inside the artifact's Put fail when worker 1 wakes after the rescue: its
// artifact lands, and attempt 2 completes with it.
func TestFaultLateArtifactWrite(t *testing.T) {
	tests := []struct {
		name           string
		pause          string // where worker 1 freezes
		wakeEarly      bool   // wakes after the rescue, before attempt 2
		lateArtifactOK bool   // its artifact may land (it froze inside the Put): attempt 2 must replace it
	}{
		{"in the handler, wakes after the rescue", "handler", true, false},
		{"in the handler, wakes after attempt 2", "handler", false, false},
		{"before the artifact write, wakes after the rescue", "before", true, false},
		{"before the artifact write, wakes after attempt 2", "before", false, false},
		{"inside the artifact's Put, wakes after the rescue", "put", true, true},
		{"inside the artifact's Put, wakes after attempt 2", "put", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			forFaultStores(t, true, func(t *testing.T, s *storage.Store) {
				ctx := context.Background()
				clk := clock.NewFake(t0)
				view1 := newFreezer(s)
				t.Cleanup(view1.thaw)
				slow := func(c *jobqueue.Config) { c.StepTimeout = time.Hour }
				q1 := newQueue(t, storage.New(view1), clk, slow)
				q2 := newQueue(t, s, clk, slow)
				enqueue(t, q1, "job-1", "agent-a")
				c1 := claim(t, q1, "w1")
				if c1 == nil {
					t.Fatal("no claim")
				}
				h1 := frozenAt(tt.pause, view1)
				ran1 := make(chan error, 1)
				go func() { _, err := c1.Run(ctx, h1); ran1 <- err }()
				within(t, "worker 1 frozen", view1.stopped)

				// Worker 1's lease runs out; worker 2 rescues the job.
				clk.Advance(jobqueue.DefaultLeaseTTL + time.Second)
				if c := claim(t, q2, "w2"); c != nil {
					t.Fatal("claimed the rescued job before its backoff")
				}
				if j := get(t, q2, "job-1"); j.Status != lifecycle.JobRetryBackoff || j.ErrorCode != codes.JobLeaseExpired {
					t.Fatalf("after the rescue: %s %s", j.Status, j.ErrorCode)
				}
				artKey, _ := layout.ArtifactKey(lifecycle.DefaultProject, artifact.IDForJob("job-1"))
				wake := func() {
					view1.thaw()
					if err := within(t, "worker 1 after waking", ran1); !errors.Is(err, lifecycle.ErrLeaseLost) {
						t.Fatalf("worker 1 woke to %v, want ErrLeaseLost", err)
					}
				}
				if tt.wakeEarly {
					wake()
					_, _, err := s.Get(ctx, artKey)
					if !tt.lateArtifactOK && !errors.Is(err, storage.ErrNotFound) {
						t.Fatalf("worker 1 wrote the artifact after losing the job (get: %v)", err)
					}
				}
				clk.Advance(jobqueue.DefaultBackoff()[0])
				c2 := claim(t, q2, "w2")
				if c2 == nil {
					t.Fatal("attempt 2 not claimed")
				}
				epoch2 := c2.Job().Lease.Epoch
				if done, err := c2.Run(ctx, producedBy("w2")); err != nil || done.Status != lifecycle.JobComplete || done.Attempt != 2 {
					t.Fatalf("attempt 2: %s attempt %d, %v", done.Status, done.Attempt, err)
				}
				committed, _, err := s.Get(ctx, artKey)
				if err != nil {
					t.Fatal(err)
				}
				if !tt.wakeEarly {
					wake()
				}
				checkAttempt2Won(t, s, q2, clk, artKey, committed, epoch2)
			})
		})
	}
}

// frozenAt is worker 1's handlers of TestFaultLateArtifactWrite, which
// freeze view1 at pause: in the handler, before the artifact write, or
// inside the artifact's Put.
func frozenAt(pause string, view1 *freezer) jobqueue.Handlers {
	h1 := producedBy("w1")
	switch pause {
	case "handler":
		call := h1.CallNotebookLM
		h1.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
			view1.freeze()
			<-view1.thawed
			return call(ctx, job, snap)
		}
	case "before":
		// ARTIFACT_WRITE is no write of its own (issue 12): the
		// point is the NLM response in hand, the artifact not
		// yet written.
		call := h1.CallNotebookLM
		h1.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
			out, err := call(ctx, job, snap)
			view1.freeze()
			<-view1.thawed
			return out, err
		}
	case "put":
		view1.arm(func(key string, _ []byte) bool { return strings.HasPrefix(key, "projects/") }, nil)
	}
	return h1
}

// checkAttempt2Won checks that the COMPLETE job's artifact is attempt 2's
// (w2's, at epoch2), unchanged since attempt 2 committed it, and that the
// job and the audit log agree.
func checkAttempt2Won(t *testing.T, s *storage.Store, q2 *jobqueue.Queue, clk *clock.Fake, artKey string, committed []byte, epoch2 int64) {
	t.Helper()
	ctx := context.Background()
	a, err := q2.Artifacts().GetForJob(ctx, lifecycle.ActorAdmin, lifecycle.DefaultProject, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	var content struct{ Title string }
	_ = json.Unmarshal(a.Content, &content)
	if content.Title != "w2" || a.Epoch != epoch2 {
		t.Fatalf("COMPLETE job's artifact written by %q at epoch %d; want attempt 2's (w2, epoch %d)", content.Title, a.Epoch, epoch2)
	}
	if now, _, _ := s.Get(ctx, artKey); string(now) != string(committed) {
		t.Fatalf("worker 1 changed the artifact after attempt 2 completed:\n%s\nwas\n%s", now, committed)
	}
	if j := get(t, q2, "job-1"); j.Status != lifecycle.JobComplete || j.ArtifactID != a.ArtifactID {
		t.Fatalf("job %s pointing at %q", j.Status, j.ArtifactID)
	}
	if st := replay(t, s, clk.Now()); st["job-1"] != lifecycle.JobComplete {
		t.Fatalf("replay %v", st)
	}
}

// unreachable is a store that, once cut, fails every call as a store that
// cannot be reached does (connection refused: transient, so the queue's
// patient store retries it).
type unreachable struct {
	driver.Store
	cut atomic.Bool
}

func (u *unreachable) err(op, key string) error {
	return &storage.OpError{Op: op, Key: key, Cause: errors.New("dial tcp 127.0.0.1:9: connect: connection refused")}
}

func (u *unreachable) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if u.cut.Load() {
		return nil, "", u.err("get", key)
	}
	return u.Store.Get(ctx, key)
}

func (u *unreachable) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	if u.cut.Load() {
		return "", u.err("put", key)
	}
	return u.Store.Put(ctx, key, v, c)
}

func (u *unreachable) Delete(ctx context.Context, key string, c storage.Condition) error {
	if u.cut.Load() {
		return u.err("delete", key)
	}
	return u.Store.Delete(ctx, key, c)
}

func (u *unreachable) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	if u.cut.Load() {
		return func(yield func(string, error) bool) { yield("", u.err("list", prefix)) }
	}
	return u.Store.ListAfter(ctx, prefix, after)
}

// TestWorkerStopsWithTheStoreUnreachable: a Worker whose store became
// unreachable while it ran a job (a MinIO that died with the process that
// started it) stopped only when the store came back: the claim's last
// writes (the agent lock's release, a lane entry) were retried with no
// deadline once the Worker's context had ended. Found as a prooftest worker
// process still running 36 minutes after its parent died. Every write a
// claim makes after its context ended is bounded by StopGrace; it failed
// before (Worker.Run never returned).
func TestWorkerStopsWithTheStoreUnreachable(t *testing.T) {
	t.Parallel()
	s := &unreachable{Store: memstore.New()}
	q := newQueue(t, storage.New(s), clock.Real(), func(c *jobqueue.Config) { c.StopGrace = 200 * time.Millisecond })
	enqueue(t, q, "job-1", "agent-a")
	entered := make(chan struct{})
	h := okHandlers()
	h.CallNotebookLM = func(ctx context.Context, _ lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
		s.cut.Store(true)
		close(entered)
		<-ctx.Done()
		return lifecycle.JobOutput{}, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &jobqueue.Worker{Queue: q, ID: "w1", Handlers: h, SweepInterval: -1, PollInterval: 10 * time.Millisecond}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	within(t, "the handler's start", entered)
	cancel()
	within(t, "Worker.Run after cancel, its store unreachable", stopped)
}
