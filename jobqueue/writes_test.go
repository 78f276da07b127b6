package jobqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// classStore counts the writes (Puts and Deletes) a store serves by the
// class of their key: job record, lane entry, agent lock, artifact, audit
// event and the rest.
type classStore struct {
	driver.Store
	mu      sync.Mutex
	writes  map[string]int
	commits int // each write of a commit is counted in writes too
	singles int // the durable writes made alone, outside a commit
}

// Unwrap lets the queue see what the store under it can do (Commit).
func (c *classStore) Unwrap() driver.Store { return c.Store }

// Commit forwards to the store under it, counting the commit and each of
// its writes by class.
func (c *classStore) Commit(ctx context.Context, ws []storage.Write) ([]storage.Version, error) {
	cm, ok := c.Store.(driver.Committer)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	vs, err := cm.Commit(ctx, ws)
	for _, w := range ws {
		op := "put"
		if w.Delete {
			op = "delete"
		}
		c.count(refused(op, err), w.Key)
	}
	if err == nil {
		c.mu.Lock()
		c.commits++
		c.mu.Unlock()
	}
	return vs, err
}

func keyClass(key string) string {
	switch {
	case strings.HasPrefix(key, layout.JobsPrefix):
		return "job record"
	case strings.HasPrefix(key, layout.LanesPrefix):
		return "lane entry"
	case strings.HasPrefix(key, layout.AgentLocksPrefix):
		return "agent lock"
	case strings.HasPrefix(key, "projects/"):
		return "artifact"
	case strings.HasPrefix(key, "audit/"):
		return "audit event"
	}
	return "other " + key
}

func (c *classStore) count(op, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writes == nil {
		c.writes = map[string]int{}
	}
	c.writes[keyClass(key)+" "+op]++
}

// A write the store refused (a lost compare-and-swap, a create-only of an
// existing key) stores nothing: it is counted apart, as "refused".
func (c *classStore) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	v, err := c.Store.Put(ctx, key, value, cond)
	c.count(refused("put", err), key)
	c.single(err)
	return v, err
}

func (c *classStore) Delete(ctx context.Context, key string, cond storage.Condition) error {
	err := c.Store.Delete(ctx, key, cond)
	c.count(refused("delete", err), key)
	c.single(err)
	return err
}

// single counts a durable write made alone.
func (c *classStore) single(err error) {
	if err == nil {
		c.mu.Lock()
		c.singles++
		c.mu.Unlock()
	}
}

func refused(op string, err error) string {
	if err != nil {
		return op + " refused"
	}
	return op
}

// durable counts the writes that stored something.
func (c *classStore) durable() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.writes {
		if !strings.HasSuffix(k, " refused") {
			n += v
		}
	}
	return n
}

func (c *classStore) table(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ks []string
	for k := range c.writes {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%-24s %.2f\n", k, float64(c.writes[k])/float64(n))
	}
	return b.String()
}

// finishCounter is a Metrics that closes done once n jobs finished.
type finishCounter struct {
	n, seen int
	mu      sync.Mutex
	done    chan struct{}
}

func (f *finishCounter) JobTransition(lifecycle.JobType, lifecycle.JobState, lifecycle.JobState, time.Duration) {
}
func (f *finishCounter) AttemptFailed(lifecycle.JobType, lifecycle.JobState, string) {}
func (f *finishCounter) JobFinished(_ lifecycle.JobType, _ lifecycle.JobState, _ time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen++; f.seen == f.n {
		close(f.done)
	}
}

// runWorker enqueues n jobs over agents agents and runs them with one
// Worker of slots slots and handlers h, the way a service does, until all
// n finished; it returns the time from the first enqueue to the last end.
// onDone, if not nil, is called once all n finished, before the Worker
// stops (and releases the agent locks it kept).
func runWorker(tb testing.TB, s *storage.Store, n, agents, slots int, h jobqueue.Handlers, onDone func()) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &finishCounter{n: n, done: make(chan struct{})}
	q := newQueue(tb, s, clock.Real(), func(c *jobqueue.Config) { c.Metrics = fc })
	start := time.Now()
	var enq sync.WaitGroup
	per := (n + slots - 1) / slots
	for w := range slots {
		enq.Go(func() {
			for i := w * per; i < min(n, (w+1)*per); i++ {
				j := spec(fmt.Sprintf("job-%d-%d", start.UnixNano(), i), "agent-"+strconv.Itoa(i%agents))
				if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, j); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	enq.Wait()
	w := &jobqueue.Worker{Queue: q, ID: "w", Handlers: h, Slots: slots, PollInterval: 10 * time.Millisecond, SweepInterval: -1}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	select {
	case <-fc.done:
	case <-time.After(time.Minute):
		tb.Errorf("%d of %d jobs finished after a minute", fc.seen, n)
	}
	el := time.Since(start)
	if onDone != nil {
		onDone()
	}
	cancel()
	if err := <-stopped; err != nil {
		tb.Error(err)
	}
	return el
}

// MaxWritesPerJob is what TestWritesPerJob holds the queue to: the store
// writes of one job's life, end to end, on the Worker's path (issue 12).
const MaxWritesPerJob = 8

// writesPerJob runs agents warm-up jobs (one per agent: the agents' lock
// objects are created once per agent, ever), then n jobs over the same
// agents with one Worker, and returns the store writes per job of the
// second run (durable ones: refused writes are in the table only), counted until its last job finished (a stopping Worker
// releases the agent locks it kept: once per Worker, not per job), and
// the table by key class.
func writesPerJob(t testing.TB, s *storage.Store, n, agents, slots int, h jobqueue.Handlers) (float64, string) {
	c := countsPerJob(t, s, n, agents, slots, h)
	return c.writes, c.table
}

// jobCounts is what countsPerJob counts, per job: every durable write
// (each write of a commit counted too), the commits, and the writes made
// alone, outside a commit.
type jobCounts struct {
	writes, commits, singles float64
	table                    string
}

// countsPerJob is writesPerJob with the commits and the single writes per
// job too.
func countsPerJob(t testing.TB, s *storage.Store, n, agents, slots int, h jobqueue.Handlers) jobCounts {
	cs := &classStore{Store: s}
	runWorker(t, storage.New(cs), agents, agents, slots, h, nil)
	cs.mu.Lock()
	cs.writes, cs.commits, cs.singles = nil, 0, 0
	cs.mu.Unlock()
	var locks int
	runWorker(t, storage.New(cs), n, agents, slots, h, func() {
		cs.mu.Lock()
		locks = cs.writes["agent lock put"]
		cs.mu.Unlock()
	})
	// The audit objects of the last jobs may land after their end was
	// counted, so the count is taken once the Worker stopped, less the
	// releases of the locks it kept (single writes).
	cs.mu.Lock()
	released := cs.writes["agent lock put"] - locks
	cs.writes["agent lock put"] = locks
	cs.singles -= released
	cs.mu.Unlock()
	c := jobCounts{commits: float64(cs.commits) / float64(n), singles: float64(cs.singles) / float64(n), writes: float64(cs.durable()) / float64(n)}
	c.table = cs.table(n) + fmt.Sprintf("(commits %.2f, single writes %.2f; and %d agent lock releases when the Worker stopped)\n", c.commits, c.singles, released)
	return c
}

// TestWritesPerJob fails when a job costs more than MaxWritesPerJob store
// writes on memstore and filestore with no-op handlers (no AssembleContext;
// with one, the move to NOTEBOOKLM_CALL is one write more, which the NLM
// backend's read of its own job needs: see docs/performance.md).
func TestWritesPerJob(t *testing.T) {
	for _, sc := range faultStores(false) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			// One slot: with several, two slots may now and then race for
			// an agent through a lane cache a moment old, which costs a
			// stale entry's delete and a lock rewrite (TestWritesPerJobTable
			// shows it: under 0.05 a job).
			per, table := writesPerJob(t, sc.new(t), 200, 20, 1, noopHandlers)
			t.Logf("writes per job:\n%s total %.2f", table, per)
			if per > MaxWritesPerJob {
				t.Fatalf("%.2f store writes per job, more than %d:\n%s", per, MaxWritesPerJob, table)
			}
		})
	}
}

// MaxCommitsPerJob is what TestCommitsPerJob holds the queue to on a
// store that commits several keys at once: a job's enqueue, its pickup
// (the agent lock, the record, the lane entry's delete) and its end (the
// artifact, the record, its audit object), each one commit, and no write
// made alone (issue 29).
const MaxCommitsPerJob = 3

// TestCommitsPerJob fails when a job costs more than MaxCommitsPerJob
// commits, or any write outside a commit, on the stores that commit
// (memstore, SQLite), with no-op handlers. The same count over the same
// store with its Commit hidden (every write made alone, as on filestore)
// is seen to fail it.
func TestCommitsPerJob(t *testing.T) {
	for _, sc := range faultStores(false) {
		if !sc.new(t).CanCommit() {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			c := countsPerJob(t, sc.new(t), 200, 20, 1, noopHandlers)
			t.Logf("writes per job:\n%s total %.2f", c.table, c.writes)
			if c.commits > MaxCommitsPerJob || c.singles > 0 || c.writes > MaxWritesPerJob {
				t.Fatalf("%.2f commits and %.2f single writes a job (%.2f writes), want at most %d and none:\n%s",
					c.commits, c.singles, c.writes, MaxCommitsPerJob, c.table)
			}
			hidden := countsPerJob(t, storage.New(struct{ driver.Store }{sc.new(t).Unwrap()}), 50, 5, 1, noopHandlers)
			if hidden.singles == 0 || hidden.commits != 0 {
				t.Fatalf("with Commit hidden: %.2f single writes and %.2f commits a job; the check cannot fail", hidden.singles, hidden.commits)
			}
		})
	}
}

// TestWritesPerJobTable logs the writes of one job's life by key class:
// the table of docs/performance.md, "Writes per job (issue 12)".
func TestWritesPerJobTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    jobqueue.Handlers
	}{{"no-op handlers", noopHandlers}, {"with AssembleContext", okHandlers()}} {
		t.Run(tc.name, func(t *testing.T) {
			per, table := writesPerJob(t, stores[0].new(t), 200, 50, 4, tc.h)
			t.Logf("writes per job over 200 jobs, 50 agents, 4 slots:\n%s total %.2f/job", table, per)
		})
	}
}

// watchStore is a driver with the Watch method of driver.Watcher: the
// test signals on ch.
type watchStore struct {
	driver.Store
	ch      chan struct{}
	watched chan string
}

func (w *watchStore) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	w.watched <- prefix
	return w.ch, nil
}

// startWorker runs w until the test ends, then stops it and checks that
// Run returned nil in time.
func startWorker(t *testing.T, w *jobqueue.Worker) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := within(t, "Worker.Run after cancel", stopped); err != nil {
			t.Error(err)
		}
	})
}

// TestWorkerWakesOnWatch: a Worker over a store that can watch learns of
// work another process enqueued at the store's signal, not at its next
// poll (an hour away on a clock that does not move by itself).
func TestWorkerWakesOnWatch(t *testing.T) {
	ws := &watchStore{Store: stores[0].new(t), ch: make(chan struct{}, 1), watched: make(chan string, 1)}
	clk := clock.NewFake(t0)
	q1, q2 := newQueue(t, storage.New(ws), clk), newQueue(t, storage.New(ws), clk)
	startWorker(t, &jobqueue.Worker{Queue: q1, ID: "w1", Handlers: okHandlers(), PollInterval: time.Hour, SweepInterval: -1})
	if p := within(t, "the Worker's Watch", ws.watched); p != layout.LanesPrefix {
		t.Fatalf("watched %q, want the lanes %q", p, layout.LanesPrefix)
	}
	<-clk.WaitForTimers(2) // the loop waits, an hour (and the callback sender a minute)
	enqueue(t, q2, "job-1", "agent-x")
	clk.Advance(time.Second) // past the last listing's rate limit, far short of the poll
	ws.ch <- struct{}{}
	waitFor(t, func() bool { return get(t, q2, "job-1").Status == lifecycle.JobComplete })
}

// TestLostAuditFlushIsRepaired: the audit object of a segment is lost (the
// writer died between the write that brought the job to rest and its
// flush, here the flush failing): the moves stay in the record, and the
// next writer (the retry's pickup) or Sweep (for a job at its end) writes
// the same object, so the audit log replays to the record's state with no
// gap, and the next segment's moves follow it.
func TestLostAuditFlushIsRepaired(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	// The 1st audit write fails (RETRY_BACKOFF's), the 2nd (its repair)
	// lands, the 3rd fails (COMPLETE's), the 4th (Sweep's repair) lands.
	var audits atomic.Int32
	fs := &flakyStore{Store: stores[0].new(t), fails: 2, match: func(key string, _ []byte) bool {
		if !strings.HasPrefix(key, "audit/") {
			return false
		}
		n := audits.Add(1)
		return n == 1 || n == 3
	}}
	q := newQueue(t, storage.New(fs), clk)
	enqueue(t, q, "job-1", "agent-a")
	// Attempt 1 fails: RETRY_BACKOFF, whose flush fails.
	c := claim(t, q, "w1")
	if _, err := c.Run(ctx, failing(errors.New("boom"), new(atomic.Int32))); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, storage.New(fs), "audit/"); n != 0 {
		t.Fatalf("%d audit objects; the flush was to fail", n)
	}
	// A fresh Queue (another process) picks the retry up: it writes the
	// lost object before the trail leaves the record.
	q2 := newQueue(t, storage.New(fs), clk)
	clk.Advance(jobqueue.DefaultBackoff()[0])
	c = claim(t, q2, "w2")
	if c == nil {
		t.Fatal("retry not claimed")
	}
	if got := replay(t, storage.New(fs), clk.Now()); got["job-1"] != lifecycle.JobRetryBackoff {
		t.Fatalf("after the retry's pickup the audit replays to %q, want the lost segment's RETRY_BACKOFF", got["job-1"])
	}
	// Attempt 2 completes; its flush fails too. Sweep writes it.
	if _, err := c.Run(ctx, okHandlers()); err != nil {
		t.Fatal(err)
	}
	if got := replay(t, storage.New(fs), clk.Now()); got["job-1"] != lifecycle.JobRetryBackoff {
		t.Fatalf("audit replays to %q before the sweep", got["job-1"])
	}
	if _, err := newQueue(t, storage.New(fs), clk).Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := replay(t, storage.New(fs), clk.Now()); got["job-1"] != lifecycle.JobComplete {
		t.Fatalf("after the sweep the audit replays to %q, want COMPLETE", got["job-1"])
	}
	var kinds []string
	for day := t0.Truncate(24 * time.Hour); !day.After(clk.Now()); day = day.Add(24 * time.Hour) {
		for e, err := range records.ReadAuditDay(ctx, storage.New(fs), day) {
			if err != nil {
				t.Fatal(err)
			}
			kinds = append(kinds, e.Event+":"+e.To)
		}
	}
	want := "job.create:PENDING job.status.update:QUEUED job.status.update:CONTEXT_ASSEMBLY job.status.update:NOTEBOOKLM_CALL job.status.update:RETRY_BACKOFF " +
		"job.status.update:QUEUED job.status.update:CONTEXT_ASSEMBLY job.status.update:NOTEBOOKLM_CALL job.status.update:ARTIFACT_WRITE artifact.create:finalized job.status.update:COMPLETE"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("audit events\n%s\nwant\n%s", got, want)
	}
}

// TestWorkerPollsSoonAfterWork: over a store that cannot watch (S3), a
// Worker whose lane poll just found work looks for more after 25 ms, not
// at its next poll (an hour away on a clock that does not move by itself), so work
// another process enqueues in a stream is found at once.
func TestWorkerPollsSoonAfterWork(t *testing.T) {
	s := struct{ driver.Store }{stores[0].new(t)} // no Watch
	clk := clock.NewFake(t0)
	q1, q2 := newQueue(t, storage.New(s), clk), newQueue(t, storage.New(s), clk)
	startWorker(t, &jobqueue.Worker{Queue: q1, ID: "w1", Handlers: okHandlers(), PollInterval: time.Hour, SweepInterval: -1})
	// Three timers: the loop's, the lane poll's and the callback sender's
	// (its minute's look at the outbox); waiting for two could return
	// before the lane poll armed its own.
	<-clk.WaitForTimers(3) // idle from the start: the loop and the lane poll wait an hour
	enqueue(t, q2, "job-1", "agent-x")
	clk.Advance(time.Hour)
	waitFor(t, func() bool { return get(t, q2, "job-1").Status == lifecycle.JobComplete })
	<-clk.WaitForTimers(3) // it found work: the lane poll's next look is 25 ms away
	enqueue(t, q2, "job-2", "agent-y")
	clk.Advance(25 * time.Millisecond)
	waitFor(t, func() bool { return get(t, q2, "job-2").Status == lifecycle.JobComplete })
}
