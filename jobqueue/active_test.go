package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// historyAgents is how many agents the history and the work in flight
// are spread over.
const historyAgents = 50

// writeHistory writes finished jobs (two COMPLETE for each DEAD) straight
// into the store, as records a queue left behind, spread over
// historyAgents agents.
func writeHistory(tb testing.TB, s *storage.Store, finished int) {
	tb.Helper()
	ctx := context.Background()
	msg := "max retries exceeded"
	for i := range finished {
		j := lifecycle.Job{
			JobID: fmt.Sprintf("old-%06d", i), RunID: "run_2026-02-24_abc123", JobType: lifecycle.JobBrief,
			AgentSlug: "agent-" + strconv.Itoa(i%historyAgents), Status: lifecycle.JobComplete, Attempt: 1, MaxAttempts: 3,
			CreatedAt: t0.Add(-time.Hour), UpdatedAt: t0.Add(-time.Hour), ArtifactID: "art-" + strconv.Itoa(i),
		}
		if i%3 == 2 {
			j.Status, j.Attempt, j.ArtifactID, j.Error, j.ErrorCode = lifecycle.JobDead, 3, "", &msg, "HANDLER_ERROR"
		}
		b, err := json.Marshal(j)
		if err != nil {
			tb.Fatal(err)
		}
		key, _ := layout.JobKey(j.JobID)
		if _, err := s.Put(ctx, key, b, storage.IfNotExists()); err != nil {
			tb.Fatal(err)
		}
	}
}

// historyWorld is a memstore holding finished history and the same work
// in flight whatever the history: every agent has run a job (so each has
// its lock), 40 jobs wait in the lanes, 5 are held by a worker that died
// (orphans once their leases lapse) and 5 wait out a retry.
func historyWorld(tb testing.TB, finished int) (*teststores.Counting, *clock.Fake) {
	tb.Helper()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	q := newQueue(tb, s, clk)
	for a := range historyAgents {
		enqueue(tb, q, "first-"+strconv.Itoa(a), "agent-"+strconv.Itoa(a))
	}
	for range historyAgents {
		c := claim(tb, q, "w")
		if _, err := c.Run(ctx, okHandlers()); err != nil {
			tb.Fatal(err)
		}
	}
	writeHistory(tb, s, finished)
	for i := range 50 {
		enqueue(tb, q, fmt.Sprintf("live-%03d", i), "agent-"+strconv.Itoa(i%historyAgents))
	}
	for i := range 10 {
		c := claim(tb, q, "w-dead")
		if c == nil {
			tb.Fatal("no live job to claim")
		}
		if i < 5 {
			continue // the worker dies holding it
		}
		if err := c.Abandon(ctx); err != nil { // a failed attempt: RETRY_BACKOFF
			tb.Fatal(err)
		}
	}
	clk.Advance(time.Hour) // the dead worker's leases lapse, the retries come due
	return &teststores.Counting{Store: s}, clk
}

type historyCost struct {
	sweep, claim, idle float64 // store round trips per sweep pass, per claim, per idle claim
	listed             int64   // keys the sweep pass listed
}

// measureHistory counts, on a fresh Queue over the world (another
// process, no caches), the round trips of one sweep pass, of each claim
// until the work in flight is claimed, and of an idle claim after.
func measureHistory(tb testing.TB, finished int) historyCost {
	tb.Helper()
	ctx := context.Background()
	cs, clk := historyWorld(tb, finished)
	q := newQueue(tb, storage.New(cs), clk)
	var hc historyCost
	r, err := q.Sweep(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if r.Rescued != 5 || r.Jobs < 50 {
		tb.Fatalf("sweep over %d finished jobs: %+v, want 5 orphans rescued and the work in flight read", finished, r)
	}
	hc.sweep, hc.listed = float64(cs.PagedOps()), cs.Listed.Load()
	cs.Reset()
	claims, ops := 0, int64(0)
	for {
		before := cs.PagedOps()
		c := claim(tb, q, "w")
		ops += cs.PagedOps() - before
		if c == nil {
			break
		}
		claims++
		if err := c.Abandon(ctx); err != nil { // frees the agent; not counted
			tb.Fatal(err)
		}
	}
	if claims != 45 { // 40 queued, 5 retries due; the 5 rescued orphans wait out their backoff
		tb.Fatalf("%d claims over %d finished jobs", claims, finished)
	}
	hc.claim = float64(ops) / float64(claims)
	cs.Reset()
	for range 100 { // a second of polling, 10 ms apart: lane and lock rechecks come due
		clk.Advance(10 * time.Millisecond)
		if c := claim(tb, q, "w"); c != nil {
			tb.Fatalf("claimed %s from an idle queue", c.Job().JobID)
		}
	}
	hc.idle = float64(cs.PagedOps()) / 100
	return hc
}

// TestCostFlatInHistory: a sweep pass and a claim cost the same store
// round trips (Lists counted per page of 1,000 keys, as S3 bills them)
// over 1,000 and over 100,000 finished jobs: they read only work in flight
// (repair.go). Issue 12 asks for at most 1.2x.
func TestCostFlatInHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 jobs")
	}
	small, large := measureHistory(t, 1000), measureHistory(t, 100000)
	t.Logf("1,000 finished: %+v; 100,000 finished: %+v", small, large)
	for _, c := range []struct {
		what         string
		small, large float64
	}{{"sweep pass", small.sweep, large.sweep}, {"claim", small.claim, large.claim}, {"idle claim", small.idle, large.idle}} {
		if c.large > 1.2*c.small {
			t.Errorf("store round trips per %s: %.1f over 1,000 finished jobs, %.1f over 100,000 (%.2fx > 1.2x)",
				c.what, c.small, c.large, c.large/c.small)
		}
	}
	if large.listed != small.listed {
		t.Errorf("the sweep listed %d keys over 100,000 finished jobs, %d over 1,000", large.listed, small.listed)
	}
}

// BenchmarkHistory: a sweep pass, and claiming the work in flight, over
// 1,000 and 100,000 finished jobs in a memstore (historyWorld), with the
// store round trips of each (ops/sweep, ops/claim, Lists per 1,000-key
// page). TestCostFlatInHistory holds the counts; this reports the time.
func BenchmarkHistory(b *testing.B) {
	for _, finished := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("finished=%d/sweep", finished), func(b *testing.B) {
			cs, clk := historyWorld(b, finished)
			q := newQueue(b, storage.New(cs), clk)
			cs.Reset()
			passes := 0
			for b.Loop() {
				if _, err := q.Sweep(context.Background()); err != nil {
					b.Fatal(err)
				}
				passes++
			}
			b.ReportMetric(float64(cs.PagedOps())/float64(passes), "ops/sweep")
		})
		b.Run(fmt.Sprintf("finished=%d/claim", finished), func(b *testing.B) {
			hc := measureHistory(b, finished)
			cs, clk := historyWorld(b, finished)
			q := newQueue(b, storage.New(cs), clk)
			for b.Loop() {
				// Claim the work in flight and give it back, on the
				// fake clock: each iteration a claim that finds work.
				c := claim(b, q, "w")
				if c == nil {
					clk.Advance(time.Minute) // the retries come due again
					continue
				}
				if err := c.Abandon(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(hc.claim, "ops/claim")
			b.ReportMetric(hc.idle, "ops/idle-claim")
		})
	}
}

// TestSweepIfDueInBatches: each sweep looks at the next SweepBatch entries
// of work in flight (agent locks, lane entries) and the batches go round
// all of them, so a repair waits for its batch. The repair here: a claim
// whose retry's lane entry could not be written released its agent's lock
// still naming the job, and the sweep lanes it.
func TestSweepIfDueInBatches(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		fs := &flakyStore{Store: s, match: func(key string, _ []byte) bool {
			return strings.HasPrefix(key, layout.LanesPrefix) && strings.HasSuffix(key, "-job-1")
		}}
		q := newQueue(t, storage.New(fs), clk, func(c *jobqueue.Config) { c.SweepBatch = 2 })
		for i := 1; i <= 4; i++ {
			enqueue(t, q, fmt.Sprintf("job-%d", i), "agent-a")
		}
		fs.mu.Lock()
		fs.fails = 1 // the retry's lane entry of job-1 is lost
		fs.mu.Unlock()
		if c := claim(t, q, "w1"); c.Abandon(ctx) == nil {
			t.Fatal("Abandon wrote the retry's lane entry")
		}
		if j := get(t, q, "job-1"); j.Status != lifecycle.JobRetryBackoff {
			t.Fatalf("job-1 %s", j.Status)
		}
		type got struct{ entries, jobs, relaned int }
		var seen []got
		for range 4 {
			r, swept, err := q.SweepIfDue(ctx, "w1", time.Minute)
			if err != nil || !swept {
				t.Fatalf("swept %v, %v", swept, err)
			}
			seen = append(seen, got{r.Entries, r.Jobs, r.Relaned})
			clk.Advance(time.Minute)
		}
		// The lock (naming job-1) and job-2's entry; job-3's and job-4's;
		// job-1's new entry; then round again, the lock naming no job now:
		// the first sweep, having relaned job-1, released it.
		if want := []got{{2, 2, 1}, {2, 2, 0}, {1, 1, 0}, {2, 1, 0}}; fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Fatalf("batches (entries, jobs, relaned) %v, want %v", seen, want)
		}
		if n := countKeys(t, s, layout.LanesPrefix); n != 4 {
			t.Fatalf("%d lane entries after the sweeps, want 4", n)
		}
	})
}

// TestLeaseLostJobStaysFindable: a claim paused past its lease writes
// nothing, and releases its agent's lock still naming its job; the sweep
// finds the job through the lock and rescues it, and a claim of the agent
// repairs it before naming another job.
func TestLeaseLostJobStaysFindable(t *testing.T) {
	for _, repairer := range []string{"sweep", "claim"} {
		t.Run(repairer, func(t *testing.T) {
			ctx := context.Background()
			s := memstore.New()
			clk := clock.NewFake(t0)
			q := newQueue(t, s, clk, func(c *jobqueue.Config) { c.StepTimeout = time.Hour })
			enqueue(t, q, "job-1", "agent-a")
			enqueue(t, q, "job-2", "agent-a")
			c := claim(t, q, "w1")
			// The worker pauses in NOTEBOOKLM_CALL past its lease: the
			// clock jumps a minute (LeaseTTL is 30 s) under the handler.
			h := jobqueue.Handlers{CallNotebookLM: func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
				clk.Advance(time.Minute)
				return lifecycle.JobOutput{Content: json.RawMessage(briefContent)}, nil
			}}
			if _, err := c.Run(ctx, h); !errors.Is(err, lifecycle.ErrLeaseLost) {
				t.Fatalf("Run after the lease lapsed: %v", err)
			}
			if j := get(t, q, "job-1"); j.Status != lifecycle.JobNotebookLMCall {
				t.Fatalf("job-1 %s", j.Status)
			}
			q2 := newQueue(t, s, clk) // another process
			switch repairer {
			case "sweep":
				r, err := q2.Sweep(ctx)
				if err != nil || r.Rescued != 1 {
					t.Fatalf("sweep %+v, %v; want job-1 rescued", r, err)
				}
			case "claim":
				c2 := claim(t, q2, "w2")
				if c2 == nil || c2.Job().JobID != "job-2" {
					t.Fatalf("claim after the lapsed lease: %v", c2)
				}
				_ = c2.Abandon(ctx)
			}
			if j := get(t, q, "job-1"); j.Status != lifecycle.JobRetryBackoff || j.ErrorCode != codes.JobLeaseExpired {
				t.Fatalf("job-1 %s %s, want RETRY_BACKOFF with LEASE_EXPIRED", j.Status, j.ErrorCode)
			}
		})
	}
}

// TestLaneFirstEntries: Enqueue and Requeue write the lane entry before the
// job. A claim that meets an entry whose job is not written yet leaves it
// alone while it is younger than LeaseTTL; the sweep and the claims
// delete one older than that (its writer died), and a duplicate Enqueue
// leaves no entry behind.
func TestLaneFirstEntries(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	q := newQueue(t, s, clk)
	enqueue(t, q, "job-1", "agent-a")
	// An Enqueue of job-0 that wrote its entry, and not yet its job.
	lane, _ := layout.LaneKey("agent-a", t0.Add(-time.Second), "job-0")
	putRaw(t, s, lane, `{"job_id":"job-0"}`)
	q2 := newQueue(t, s, clk)
	if c := claim(t, q2, "w"); c != nil {
		t.Fatalf("claimed %s past a pending entry", c.Job().JobID)
	}
	if countKeys(t, s, lane) != 1 {
		t.Fatal("a claim deleted an entry younger than LeaseTTL")
	}
	if r, err := q2.Sweep(ctx); err != nil || r.Dropped != 0 {
		t.Fatalf("sweep %+v, %v; want the pending entry kept", r, err)
	}
	// Its writer died: after LeaseTTL the entry is garbage.
	clk.Advance(jobqueue.DefaultLeaseTTL)
	if r, err := q2.Sweep(ctx); err != nil || r.Dropped != 1 {
		t.Fatalf("sweep %+v, %v; want the abandoned entry dropped", r, err)
	}
	if c := claim(t, q2, "w"); c == nil || c.Job().JobID != "job-1" {
		t.Fatalf("claim after the abandoned entry: %v", c)
	}
	// A duplicate Enqueue leaves its entry nowhere.
	clk.Advance(time.Second)
	if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, spec("job-1", "agent-a")); !errors.Is(err, lifecycle.ErrJobExists) {
		t.Fatalf("duplicate Enqueue: %v", err)
	}
	if n := countKeys(t, s, layout.LanesPrefix); n != 0 {
		t.Fatalf("%d lane entries after a duplicate Enqueue", n)
	}
}

// TestFailedJobUnderLockIsBuried: a pickup that found a job's attempts
// exhausted wrote FAILED and could not write DEAD; the lock still names
// the job, so the next claim of the agent (or the sweep) buries it.
func TestFailedJobUnderLockIsBuried(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	fs := &flakyStore{Store: s, match: func(key string, value []byte) bool {
		return key == "jobs/job-1.json" && strings.Contains(string(value), `"status":"DEAD"`)
	}}
	q := newQueue(t, storage.New(fs), clk, func(c *jobqueue.Config) { c.MaxAttempts = 1 })
	enqueue(t, q, "job-1", "agent-a")
	if err := claim(t, q, "w").Abandon(ctx); err != nil { // attempt 1 of 1 fails
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	fs.mu.Lock()
	fs.fails = 1
	fs.mu.Unlock()
	if _, err := q.Claim(ctx, "w"); err == nil {
		t.Fatal("the claim that could not bury gave no error")
	}
	if j := get(t, q, "job-1"); j.Status != lifecycle.JobFailed {
		t.Fatalf("job-1 %s, want FAILED", j.Status)
	}
	r, err := newQueue(t, s, clk).Sweep(ctx)
	if err != nil || r.Buried != 1 {
		t.Fatalf("sweep %+v, %v; want job-1 buried", r, err)
	}
	if j := get(t, q, "job-1"); j.Status != lifecycle.JobDead {
		t.Fatalf("job-1 %s, want DEAD", j.Status)
	}
}

// TestAuditGapStaysFindable: the audit write of a COMPLETE failed while
// its worker lived on; the claim does not settle the job, so the lock goes
// on naming it and the sweep writes the missing event. Since the queue
// writes one audit object per job segment (issue 12, jobwrites), the lost
// object holds every move of the segment, so before the sweep the job has
// no event at all; after it, every one.
func TestAuditGapStaysFindable(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	fs := &flakyStore{Store: s, fails: 1, match: func(key string, value []byte) bool {
		return strings.HasPrefix(key, "audit/") && strings.Contains(string(value), `"to":"COMPLETE"`)
	}}
	q := newQueue(t, storage.New(fs), clk)
	enqueue(t, q, "job-1", "agent-a")
	if j, err := claim(t, q, "w").Run(ctx, okHandlers()); err != nil || j.Status != lifecycle.JobComplete {
		t.Fatalf("Run: %s, %v", j.Status, err)
	}
	if got := replay(t, s, clk.Now()); len(got) != 0 {
		t.Fatalf("replayed states before the sweep %v, want the segment's object (COMPLETE's event with it) missing", got)
	}
	lockKey, _ := layout.AgentLockKey("agent-a")
	b, _, err := s.Get(ctx, lockKey)
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Owner string `json:"owner"`
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(b, &lock); err != nil || lock.JobID != "job-1" || lock.Owner != "" {
		t.Fatalf("agent lock %s (%v), want it released still naming job-1", b, err)
	}
	if r, err := newQueue(t, s, clk).Sweep(ctx); err != nil || r.Jobs != 1 {
		t.Fatalf("sweep %+v, %v; want job-1 read through its lock", r, err)
	}
	if got := replay(t, s, clk.Now()); got["job-1"] != lifecycle.JobComplete {
		t.Fatalf("replayed states %v", got)
	}
}

// TestStaleEntryDeletedAtOnce: a young lane entry whose job moved on past
// it (here: DEAD after the entry's time) is stale, deleted by the next
// claim at once; one no older than the DEAD job's last write may be a
// Requeue's, written ahead of the job, and is left while younger than
// LeaseTTL.
func TestStaleEntryDeletedAtOnce(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	q := newQueue(t, s, clk, func(c *jobqueue.Config) { c.MaxAttempts = 1 })
	enqueue(t, q, "job-1", "agent-a")
	if err := claim(t, q, "w").Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if c := claim(t, q, "w"); c != nil { // attempts exhausted: FAILED, DEAD
		t.Fatalf("claimed %s", c.Job().JobID)
	}
	dead := get(t, q, "job-1")
	if dead.Status != lifecycle.JobDead {
		t.Fatalf("job-1 %s", dead.Status)
	}
	stale, _ := layout.LaneKey("agent-a", dead.UpdatedAt.Add(-time.Millisecond), "job-1")
	requeue, _ := layout.LaneKey("agent-a", dead.UpdatedAt, "job-1")
	putRaw(t, s, stale, `{"job_id":"job-1"}`)
	putRaw(t, s, requeue, `{"job_id":"job-1"}`)
	clk.Advance(time.Second)
	if c := claim(t, newQueue(t, s, clk), "w"); c != nil {
		t.Fatalf("claimed %s", c.Job().JobID)
	}
	if countKeys(t, s, stale) != 0 || countKeys(t, s, requeue) != 1 {
		t.Fatalf("lane entries %d stale, %d a requeue's; want 0 and 1", countKeys(t, s, stale), countKeys(t, s, requeue))
	}
	// The Requeue completes: the job points at its entry and runs.
	if _, err := q.Requeue(ctx, lifecycle.ActorAdmin, "job-1"); err != nil {
		t.Fatal(err)
	}
	if c := claim(t, q, "w"); c == nil || c.Job().JobID != "job-1" {
		t.Fatalf("claim after the requeue: %v", c)
	}
}

// TestKeptLockSettledByTakeover: a claim ends its job's run (ran_epoch in
// the record) and dies before settling it, its agent's lock still held as
// it took it, naming the job: the retry's lane entry or the COMPLETE's
// audit object was never written. Another process, with work ready for
// the agent, takes the lock as kept (the run ended) and settles the job
// before the lock names its own, so the job stays findable: laned again,
// or its audit written (merge of issue 12's kept lock and flat sweep).
func TestKeptLockSettledByTakeover(t *testing.T) {
	for _, lost := range []string{"lane entry", "audit object"} {
		t.Run(lost, func(t *testing.T) {
			ctx := context.Background()
			s := memstore.New()
			clk := clock.NewFake(t0)
			lockKey, _ := layout.AgentLockKey("agent-a")
			fs := &flakyStore{Store: s, match: func(key string, value []byte) bool {
				switch {
				case key == lockKey: // the release: the worker died first
					return !strings.Contains(string(value), `"owner"`)
				case lost == "lane entry":
					return strings.HasPrefix(key, layout.LanesPrefix) && strings.HasSuffix(key, "-job-1")
				default:
					return strings.HasPrefix(key, "audit/")
				}
			}}
			q := newQueue(t, storage.New(fs), clk)
			enqueue(t, q, "job-1", "agent-a")
			c := claim(t, q, "w1")
			fs.mu.Lock()
			fs.fails = 2
			fs.mu.Unlock()
			if lost == "lane entry" {
				if err := c.Abandon(ctx); err == nil {
					t.Fatal("Abandon wrote the retry's lane entry")
				}
			} else if j, err := c.Run(ctx, okHandlers()); err != nil || j.Status != lifecycle.JobComplete {
				t.Fatalf("Run: %s, %v", j.Status, err)
			}
			b, _, err := s.Get(ctx, lockKey)
			if err != nil || !strings.Contains(string(b), `"owner":"w1"`) || !strings.Contains(string(b), `"job_id":"job-1"`) {
				t.Fatalf("agent lock %s, %v; want it held by w1 naming job-1", b, err)
			}
			q2 := newQueue(t, s, clk) // another process, within the lock's lease
			enqueue(t, q2, "job-2", "agent-a")
			c2 := claim(t, q2, "w2")
			if c2 == nil || c2.Job().JobID != "job-2" {
				t.Fatalf("claim of the kept lock: %v", c2)
			}
			switch lost {
			case "lane entry":
				if n := countKeys(t, s, get(t, q2, "job-1").ReadyKey); n != 1 {
					t.Fatalf("job-1's lane entry not rewritten before the lock named job-2")
				}
				if _, err := c2.Run(ctx, okHandlers()); err != nil {
					t.Fatal(err)
				}
				clk.Advance(time.Hour)
				if c3 := claim(t, q2, "w2"); c3 == nil || c3.Job().JobID != "job-1" {
					t.Fatalf("the retry of job-1 not claimed: %v", c3)
				}
			default:
				if got := replay(t, s, clk.Now()); got["job-1"] != lifecycle.JobComplete {
					t.Fatalf("job-1's audit replays to %q before the lock named job-2, want COMPLETE", got["job-1"])
				}
			}
		})
	}
}

// gate pauses the first store call that matches, once: hit is closed when
// the call is reached (before a Put is made, or after it returned when
// after is set), and the call goes on when open is closed.
type gate struct {
	driver.Store
	match func(key string) bool
	after bool
	once  sync.Once
	hit   chan struct{}
	open  chan struct{}
}

func newGate(s *storage.Store, after bool, match func(key string) bool) *gate {
	return &gate{Store: s, match: match, after: after, hit: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) pause(key string) {
	if g.match(key) {
		g.once.Do(func() {
			close(g.hit)
			<-g.open
		})
	}
}

func (g *gate) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if !g.after {
		g.pause(key)
	}
	v, err := g.Store.Put(ctx, key, value, cond)
	if g.after && err == nil {
		g.pause(key)
	}
	return v, err
}

// TestPickupAfterLockLost: the prooftest's "1 of 1000 jobs still open". A
// claim (w1) takes the agent lock naming job-1 and is paused past its lease
// just before the pickup's write; another process (w2) takes the expired
// lock naming job-1 too (still QUEUED: nothing to repair). w1's pickup then
// lands first: job-1 is in CONTEXT_ASSEMBLY under w1's old epoch, its lane
// entry deleted, while w2, finding job-1 picked up, renames the lock to
// job-2. job-1 was in neither its agent's lane nor named by its agent's
// lock, so no claim and no sweep (which reads only work in flight) could
// ever find it once w1 died. The pickup is fenced by no lock, so the claim
// must check its lock still names the job after the pickup, and put the job
// back in its lane if not.
func TestPickupAfterLockLost(t *testing.T) {
	ctx := context.Background()
	s, clk, lockKey := latePickup(t, -1)
	// Whatever happened, job-1 is in flight: it must be in agent-a's lane
	// or named by agent-a's lock, so that the sweep and the claims find it.
	clk.Advance(time.Hour)
	q3 := newQueue(t, s, clk) // another process
	if _, err := q3.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	j := get(t, q3, "job-1")
	b, _, _ := s.Get(ctx, lockKey)
	if j.Status != lifecycle.JobRetryBackoff || j.ReadyKey == "" || countKeys(t, s, j.ReadyKey) != 1 {
		t.Fatalf("job-1 %s (ready key %q, lease %+v), lane entries of agent-a %d, agent lock %s: lost to the sweep and the claims",
			j.Status, j.ReadyKey, j.Lease, countKeys(t, s, layout.LanesPrefix), b)
	}
	clk.Advance(time.Hour)
	if c := claim(t, q3, "w3"); c == nil || c.Job().JobID != "job-1" {
		t.Fatalf("job-1 not claimed again: %v", c)
	}
}

// dyingAfterPickup is the store of a process that is paused just before
// its pickup write of jobKey (hit, open, as gate) and dies ops store calls
// after that write lands: every later call fails and changes nothing. A
// negative ops never dies.
type dyingAfterPickup struct {
	driver.Store
	jobKey string
	ops    int
	hit    chan struct{}
	open   chan struct{}
	mu     sync.Mutex
	armed  bool
	left   int
}

func (d *dyingAfterPickup) dead() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.armed || d.ops < 0 {
		return false
	}
	d.left--
	return d.left < 0
}

func (d *dyingAfterPickup) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if d.dead() {
		return nil, "", storage.ErrUnavailable
	}
	return d.Store.Get(ctx, key)
}

func (d *dyingAfterPickup) Delete(ctx context.Context, key string, cond storage.Condition) error {
	if d.dead() {
		return storage.ErrUnavailable
	}
	return d.Store.Delete(ctx, key, cond)
}

func (d *dyingAfterPickup) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	if d.dead() {
		return func(yield func(string, error) bool) { yield("", storage.ErrUnavailable) }
	}
	return d.Store.ListAfter(ctx, prefix, after)
}

func (d *dyingAfterPickup) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if d.dead() {
		return "", storage.ErrUnavailable
	}
	pickup := false
	d.mu.Lock()
	if key == d.jobKey && !d.armed {
		pickup = true
	}
	d.mu.Unlock()
	if pickup {
		close(d.hit)
		<-d.open
	}
	v, err := d.Store.Put(ctx, key, value, cond)
	if pickup {
		d.mu.Lock()
		d.armed, d.left = true, d.ops
		d.mu.Unlock()
	}
	return v, err
}

// latePickup plays the race of TestPickupAfterLockLost on a new memstore:
// w1 takes agent-a's lock naming job-1 and is paused past its lease just
// before its pickup write; w2 takes the lapsed lock; w1's pickup lands and
// w1 dies dies store calls later (negative: never, but its claim is never
// run either); w2 picks job-2 up and runs it. It returns the store, the
// clock and agent-a's lock key.
func latePickup(t *testing.T, dies int) (*storage.Store, *clock.Fake, string) {
	t.Helper()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	q := newQueue(t, s, clk)
	enqueue(t, q, "job-1", "agent-a")
	enqueue(t, q, "job-2", "agent-a")
	jobKey, _ := layout.JobKey("job-1")
	lockKey, _ := layout.AgentLockKey("agent-a")
	ga := &dyingAfterPickup{Store: s, jobKey: jobKey, ops: dies, hit: make(chan struct{}), open: make(chan struct{})} // w1
	gb := newGate(s, true, func(key string) bool { return key == lockKey })                                           // w2: after its take of the lock
	qa, qb := newQueue(t, storage.New(ga), clk), newQueue(t, storage.New(gb), clk)
	type result struct {
		c   *jobqueue.Claim
		err error
	}
	ca, cb := make(chan result, 1), make(chan result, 1)
	go func() {
		c, err := qa.Claim(ctx, "w1")
		ca <- result{c, err}
	}()
	within(t, "w1's pickup", ga.hit)
	clk.Advance(jobqueue.DefaultLeaseTTL + time.Second) // w1's lock lapses
	go func() {
		c, err := qb.Claim(ctx, "w2")
		cb <- result{c, err}
	}()
	within(t, "w2's take of the lock", gb.hit)
	close(ga.open) // w1's pickup of job-1 lands
	if ra := within(t, "w1's claim", ca); dies < 0 && ra.err != nil {
		t.Fatalf("w1's claim: %v", ra.err)
	}
	// w1 dies here, if not before: its claim, if any, is never run.
	close(gb.open)
	rb := within(t, "w2's claim", cb)
	if rb.err != nil || rb.c == nil || rb.c.Job().JobID != "job-2" {
		t.Fatalf("w2's claim: %v, %v; want job-2", rb.c, rb.err)
	}
	if _, err := rb.c.Run(ctx, okHandlers()); err != nil {
		t.Fatal(err)
	}
	return s, clk, lockKey
}

// TestPickupAfterLockLostThenDeath is TestPickupAfterLockLost with w1
// dying at every point after its late pickup lands: before it can read the
// lock again, put job-1 back in its lane or tidy its lane entry. Whatever
// point it dies at, job-1 must stay findable: by the sweep, and, without
// any sweep, by the agent's next claims.
func TestPickupAfterLockLostThenDeath(t *testing.T) {
	t.Parallel()
	for ops := range 5 {
		for _, sweep := range []bool{true, false} {
			t.Run(fmt.Sprintf("dies %d calls after the pickup, sweep %v", ops, sweep), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s, clk, lockKey := latePickup(t, ops)
				q3 := newQueue(t, s, clk) // another process
				for range 5 {
					clk.Advance(time.Hour)
					if sweep {
						if _, err := q3.Sweep(ctx); err != nil {
							t.Fatal(err)
						}
					}
					c, err := q3.Claim(ctx, "w3")
					if err != nil {
						t.Fatal(err)
					}
					if c != nil && c.Job().JobID == "job-1" {
						return
					}
				}
				j := get(t, q3, "job-1")
				b, _, _ := s.Get(ctx, lockKey)
				t.Fatalf("job-1 %s (ready key %q, lease %+v), lane entries of agent-a %d, agent lock %s: lost to the sweep and the claims",
					j.Status, j.ReadyKey, j.Lease, countKeys(t, s, layout.LanesPrefix), b)
			})
		}
	}
}

// TestSlowEnqueueRelanes: an Enqueue (Requeue shares its relaneIfSlow) whose job write lands
// more than LeaseTTL after its lane entry, which a sweep meanwhile deleted
// as the garbage of a dead writer, writes the entry again: the job is
// claimed, not left pointing at an entry that no longer exists.
func TestSlowEnqueueRelanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	enqueue(t, newQueue(t, s, clk), "job-0", "agent-a") // the agent's lock exists
	jobKey, _ := layout.JobKey("job-1")
	g := newGate(s, false, func(key string) bool { return key == jobKey })
	qa := newQueue(t, storage.New(g), clk)
	done := make(chan error, 1)
	go func() {
		_, err := qa.Enqueue(ctx, lifecycle.ActorGateway, spec("job-1", "agent-a"))
		done <- err
	}()
	within(t, "the job write", g.hit)
	clk.Advance(jobqueue.DefaultLeaseTTL + time.Second)
	q2 := newQueue(t, s, clk)
	if r, err := q2.Sweep(ctx); err != nil || r.Dropped != 1 {
		t.Fatalf("sweep %+v, %v; want the entry taken for garbage", r, err)
	}
	close(g.open)
	if err := within(t, "the Enqueue", done); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 2 {
		c := claim(t, q2, "w")
		if c == nil {
			break
		}
		seen[c.Job().JobID] = true
		if _, err := c.Run(ctx, okHandlers()); err != nil {
			t.Fatal(err)
		}
	}
	if !seen["job-1"] {
		j := get(t, q2, "job-1")
		t.Fatalf("job-1 %s with ready key %q (%d lane entries) never claimed", j.Status, j.ReadyKey, countKeys(t, s, j.ReadyKey))
	}
}

// TestTakeLandsAfterPickupConfirmed: the prooftest's stall under load, as
// its write history told it. w1 takes agent-a's lock naming job-1 and is
// paused past its lease just before the pickup; w2 reads the lapsed lock
// and job-1 (still QUEUED: nothing to repair) and is paused just before
// its compare-and-swap of the lock. w1's pickup lands, and its check that
// the lock still names job-1 passes: the lock is unchanged, w2's take not
// yet landed. Then w2's take lands on the version it read, naming job-2:
// job-1 is left in CONTEXT_ASSEMBLY, in no lane, named by no lock, and
// once w1 dies no claim and no sweep ever finds it. A read of the lock
// after the pickup cannot fence a take already decided; a write of it can
// (w2's compare-and-swap then fails). It failed before confirmPickup
// renewed the lock instead of reading it.
func TestTakeLandsAfterPickupConfirmed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	q := newQueue(t, s, clk)
	enqueue(t, q, "job-1", "agent-a")
	jobKey, _ := layout.JobKey("job-1")
	lockKey, _ := layout.AgentLockKey("agent-a")
	ga := &dyingAfterPickup{Store: s, jobKey: jobKey, ops: -1, hit: make(chan struct{}), open: make(chan struct{})} // w1
	gb := newGate(s, false, func(key string) bool { return key == lockKey })                                        // w2: before its take
	qa, qb := newQueue(t, storage.New(ga), clk), newQueue(t, storage.New(gb), clk)
	type result struct {
		c   *jobqueue.Claim
		err error
	}
	ca, cb := make(chan result, 1), make(chan result, 1)
	go func() {
		c, err := qa.Claim(ctx, "w1")
		ca <- result{c, err}
	}()
	within(t, "w1's pickup", ga.hit)
	// job-2 lands at the head of the lane, ahead of job-1 (as a retry or a
	// lane listed earlier puts another job first in the prooftest): w2
	// will name it.
	enqueue(t, newQueue(t, s, clock.NewFake(t0.Add(-time.Minute))), "job-2", "agent-a")
	clk.Advance(jobqueue.DefaultLeaseTTL + time.Second) // w1's lock lapses
	go func() {
		c, err := qb.Claim(ctx, "w2")
		cb <- result{c, err}
	}()
	within(t, "w2's take of the lock", gb.hit)
	close(ga.open) // w1's pickup of job-1 lands, and its claim checks the lock
	ra := within(t, "w1's claim", ca)
	close(gb.open) // w2's take lands
	rb := within(t, "w2's claim", cb)
	if rb.err != nil {
		t.Fatalf("w2's claim: %v", rb.err)
	}
	if rb.c != nil {
		if _, err := rb.c.Run(ctx, okHandlers()); err != nil {
			t.Fatal(err)
		}
	}
	_ = ra                    // w1 dies here: its claim, if it has one, is never run
	q3 := newQueue(t, s, clk) // another process
	for range 5 {
		clk.Advance(time.Hour)
		if _, err := q3.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		c, err := q3.Claim(ctx, "w3")
		if err != nil {
			t.Fatal(err)
		}
		if c != nil && c.Job().JobID == "job-1" {
			return
		}
		if c != nil {
			if _, err := c.Run(ctx, okHandlers()); err != nil {
				t.Fatal(err)
			}
		}
	}
	j := get(t, q3, "job-1")
	b, _, _ := s.Get(ctx, lockKey)
	t.Fatalf("job-1 %s (ready key %q, lease %+v), lane entries of agent-a %d, agent lock %s: lost to the sweep and the claims",
		j.Status, j.ReadyKey, j.Lease, countKeys(t, s, layout.LanesPrefix), b)
}
