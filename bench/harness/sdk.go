package harness

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// The SDK's driver goes through its public API only (jobqueue.New, Enqueue,
// Worker), so it keeps working while the queue's internals change; only a
// change of that API should need a fix here.

// briefContent is a valid BRIEF artifact: the no-op handler's answer.
const briefContent = `{"title":"Brief","body":"Short text","entity_map":{"violin":"Violin"},"word_count":2}`

// counting is a driver over a Store that counts its round trips, like the SDK's
// internal/testkit/teststores.Counting (which a nested module cannot import).
type counting struct {
	driver.Store
	// s is the same Store, for the capabilities a wrapper forwards
	// (Watch, Commit), which the embedded interface does not carry.
	s                          *storage.Store
	gets, puts, deletes, lists atomic.Int64
	// commits counts the multi-key commits (driver.Committer); each of
	// their writes counts in puts or deletes as a single write does, as
	// a refused single write counts too. refused and refusedWrites count
	// the commits refused whole (a condition did not hold: nothing
	// written) and their writes, so a batch path that retries is seen.
	commits, refused, refusedWrites atomic.Int64
	// writing counts the writes in progress, for Drain.
	writing atomic.Int64
}

func (c *counting) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

func (c *counting) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	c.puts.Add(1)
	c.writing.Add(1)
	defer c.writing.Add(-1)
	return c.Store.Put(ctx, key, value, cond)
}

func (c *counting) Delete(ctx context.Context, key string, cond storage.Condition) error {
	c.deletes.Add(1)
	c.writing.Add(1)
	defer c.writing.Add(-1)
	return c.Store.Delete(ctx, key, cond)
}

// ListAfter counts one listing (a List of the Store over the count is a
// ListAfter from the start).
func (c *counting) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	c.lists.Add(1)
	return c.Store.ListAfter(ctx, prefix, after)
}

// Unwrap is the store under the wrapper (driver.Unwrapper), through which
// the SDK finds the capabilities it looks up by unwrapping (Settler,
// AtomicityReporter) as it would on the bare store.
func (c *counting) Unwrap() driver.Store { return c.s }

// commit is driver.Committer's Commit, for the wrappers below that offer
// it: each of its writes counts as one write, so a job's writes per job
// mean the same whether they went one by one or shared a commit.
func (c *counting) commit(ctx context.Context, writes []driver.Write) ([]storage.Version, error) {
	c.commits.Add(1)
	for _, w := range writes {
		if w.Delete {
			c.deletes.Add(1)
		} else {
			c.puts.Add(1)
		}
	}
	c.writing.Add(1)
	defer c.writing.Add(-1)
	vs, err := c.s.Commit(ctx, writes)
	if errors.Is(err, storage.ErrPreconditionFailed) {
		c.refused.Add(1)
		c.refusedWrites.Add(int64(len(writes)))
	}
	return vs, err
}

// The wrappers forward each optional capability of the store under them,
// and only those it has: the SDK finds a capability by a type assertion on
// its Store's driver, so a wrapper that hid one would measure another path
// (pickup by polling instead of Watch, single writes instead of Commit),
// and one that claimed a missing one would fail.

// watching is counting over a store that signals changes (its driver is a
// driver.Watcher):
// the Worker finds another process's enqueues at the signal, as it does on
// the bare store; the signal is no store round trip and is not counted.
type watching struct {
	*counting
	w *storage.Store
}

func (c watching) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return c.w.Watch(ctx, prefix)
}

// committing is counting over a store that commits several writes as one
// (driver.Committer).
type committing struct{ *counting }

func (c committing) Commit(ctx context.Context, writes []driver.Write) ([]storage.Version, error) {
	return c.commit(ctx, writes)
}

// watchingCommitting is counting over a store with both.
type watchingCommitting struct{ watching }

func (c watchingCommitting) Commit(ctx context.Context, writes []driver.Write) ([]storage.Version, error) {
	return c.commit(ctx, writes)
}

// wrapCounting returns the counting wrapper of s with the capabilities s has.
func wrapCounting(s *storage.Store) (*counting, driver.Store) {
	cs := &counting{Store: s, s: s}
	_, watch := s.Unwrap().(driver.Watcher)
	switch commit := s.CanCommit(); {
	case watch && commit:
		return cs, watchingCommitting{watching{cs, s}}
	case watch:
		return cs, watching{cs, s}
	case commit:
		return cs, committing{cs}
	}
	return cs, cs
}

var (
	_ driver.Watcher   = watching{}
	_ driver.Committer = committing{}
	_ driver.Watcher   = watchingCommitting{}
	_ driver.Committer = watchingCommitting{}
)

// sdkDriver runs jobqueue over one of the SDK's stores.
type sdkDriver struct {
	name string
	// fresh returns a new, empty store and the address another process
	// opens it by ("" when none can).
	fresh   func(ctx context.Context) (*storage.Store, string, error)
	cleanup func() error
	// server reads the CPU of the store's server (MinIO's process); nil
	// for a store in this process.
	server func() (time.Duration, error)

	mu    sync.Mutex
	raw   *storage.Store // the store itself, closed at the next Reset and at Close
	store *counting
	queue *jobqueue.Queue
	addr  string
	hooks atomic.Pointer[Hooks]
}

// logger shows the queue's warnings (a failed audit write, a quarantined
// record): a benchmark that hides them could report a broken run as fast.
var logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func (d *sdkDriver) Name() string { return d.name }

func (d *sdkDriver) WritesUnit() string { return "store Put+Delete" }

func (d *sdkDriver) ServerCPU(context.Context) (time.Duration, error) {
	if d.server == nil {
		return 0, nil
	}
	return d.server()
}

func (d *sdkDriver) Addr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.addr
}

func (d *sdkDriver) Reset(ctx context.Context) error {
	// The last measurement's store is closed before the next one is made
	// (fresh may remove its files; SQLite holds them open).
	if err := d.closeStore(); err != nil {
		return err
	}
	s, addr, err := d.fresh(ctx)
	if err != nil {
		return err
	}
	return d.use(s, addr)
}

func (d *sdkDriver) closeStore() error {
	d.mu.Lock()
	raw := d.raw
	d.raw, d.store, d.queue = nil, nil, nil
	d.mu.Unlock()
	if raw == nil {
		return nil
	}
	return raw.Close()
}

func (d *sdkDriver) use(s *storage.Store, addr string) error {
	cs, w := wrapCounting(s)
	q, err := jobqueue.New(jobqueue.Config{Store: storage.New(w), Node: "bench", Logger: logger, Metrics: sdkMetrics{d}})
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.raw, d.store, d.queue, d.addr = s, cs, q, addr
	d.mu.Unlock()
	return nil
}

func (d *sdkDriver) current() (*counting, *jobqueue.Queue) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.store, d.queue
}

func (d *sdkDriver) Work(ctx context.Context, slots int, h Hooks) (func() error, error) {
	_, q := d.current()
	if q == nil {
		return nil, errors.New("harness: Work before Reset")
	}
	d.hooks.Store(&h)
	// One handler, as the peers' jobs have: the job starts when it is
	// called (after the pickup's write). An AssembleContext handler would
	// cost the job a write of its own (docs/performance.md).
	w := &jobqueue.Worker{Queue: q, ID: "bench-worker", Slots: slots, Handlers: jobqueue.Handlers{
		CallNotebookLM: func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
			var p Payload
			if err := json.Unmarshal(job.Payload, &p); err != nil {
				return lifecycle.JobOutput{}, jobqueue.Permanent(err)
			}
			h.Started(p)
			return lifecycle.JobOutput{Content: json.RawMessage(briefContent)}, nil
		},
	}}
	ctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	return func() error {
		cancel()
		err := <-errc
		d.hooks.Store(nil)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		return err
	}, nil
}

// Drain waits for the writes that follow a job's COMPLETE: the queue
// reports COMPLETE (Metrics.JobFinished) after the record's write and
// before the audit events of that write, in the same call. Stopping the
// worker at the last JobFinished would cancel the last audit writes (and
// leave them out of the count and the time), so the run ends only when no
// write has been in progress for a millisecond; an idle worker's claims
// read and list but do not write. Should one write anyway, the wait ends
// after 5 s with a warning rather than hanging the run.
func (d *sdkDriver) Drain(ctx context.Context) error {
	s, _ := d.current()
	quiet := 0
	limit := time.Now().Add(5 * time.Second)
	for quiet < 2 {
		if time.Now().After(limit) {
			logger.Warn("drain: writes still in progress after 5 s; ending the measurement anyway")
			return nil
		}
		if s.writing.Load() == 0 {
			quiet++
		} else {
			quiet = 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Microsecond):
		}
	}
	return nil
}

func (d *sdkDriver) Enqueue(ctx context.Context, p Payload) error {
	_, q := d.current()
	_, err := q.Enqueue(ctx, lifecycle.ActorGateway, newJob(p))
	return err
}

// EnqueueMany inserts the jobs with one Queue.InsertMany call (the
// batch's writes share a commit where the store can: Store.CanCommit).
func (d *sdkDriver) EnqueueMany(ctx context.Context, ps []Payload) error {
	_, q := d.current()
	jobs := make([]jobqueue.NewJob, len(ps))
	for i, p := range ps {
		jobs[i] = newJob(p)
	}
	_, err := q.InsertMany(ctx, jobs)
	return err
}

func (d *sdkDriver) BatchCall() string { return "InsertMany" }

func newJob(p Payload) jobqueue.NewJob {
	return jobqueue.NewJob{RunID: "run_2026-02-24_bench", JobType: lifecycle.JobBrief,
		AgentSlug: "agent-" + strconv.Itoa(p.Agent), Payload: marshal(p)}
}

func (d *sdkDriver) Counters(context.Context) (Counters, error) {
	s, _ := d.current()
	if s == nil {
		return Counters{}, nil
	}
	return Counters{Writes: s.puts.Load() + s.deletes.Load(), Reads: s.gets.Load(), Lists: s.lists.Load(),
		Extra: map[string]int64{"puts": s.puts.Load(), "deletes": s.deletes.Load(), "store_commits": s.commits.Load(),
			"store_commits_refused": s.refused.Load(), "refused_commit_writes": s.refusedWrites.Load()}}, nil
}

func (d *sdkDriver) Close() error {
	err := d.closeStore()
	if d.cleanup != nil {
		err = errors.Join(err, d.cleanup())
	}
	return err
}

// sdkMetrics turns the queue's JobFinished into Hooks.Done: COMPLETE is
// reported after the write that made it so, which is the SDK's end of a job.
type sdkMetrics struct{ d *sdkDriver }

func (m sdkMetrics) JobTransition(lifecycle.JobType, lifecycle.JobState, lifecycle.JobState, time.Duration) {
}

func (m sdkMetrics) AttemptFailed(t lifecycle.JobType, step lifecycle.JobState, code string) {
	logger.Warn("attempt failed", "type", t, "step", step, "code", code)
}

func (m sdkMetrics) JobFinished(_ lifecycle.JobType, outcome lifecycle.JobState, _ time.Duration) {
	if outcome != lifecycle.JobComplete {
		logger.Warn("job finished", "outcome", outcome)
		return
	}
	if h := m.d.hooks.Load(); h != nil {
		h.Done()
	}
}

// NewMemstore is the SDK on memstore: the queue's own cost, no I/O.
func NewMemstore() Driver {
	return &sdkDriver{name: NameMemstore, fresh: func(context.Context) (*storage.Store, string, error) {
		return memstore.New(), "", nil
	}}
}

// NewFilestore is the SDK on filestore, each measurement in a new directory
// under base, which should be on the disk being measured (not tmpfs).
func NewFilestore(base string) Driver {
	return inFreshDirs(NameFilestore, base, func(_ context.Context, dir string) (*storage.Store, string, error) {
		s, err := filestore.New(dir)
		return s, dir, err
	})
}

func openFilestore(dir string) (Driver, error) {
	s, err := filestore.New(dir)
	if err != nil {
		return nil, err
	}
	d := &sdkDriver{name: NameFilestore}
	return d, d.use(s, dir)
}

// sqliteFile is the database's name in its measurement's directory.
const sqliteFile = "bench.db"

// NewSQLite is the SDK on sqlitestore (its defaults: WAL, synchronous=FULL,
// its group commit), each measurement in a new database file under base,
// which should be on the disk being measured (not tmpfs). Its Addr is the
// file's path: another process opens the same file (Open), as a second
// process of an application would.
func NewSQLite(base string) Driver {
	return inFreshDirs(NameSQLite, base, func(ctx context.Context, dir string) (*storage.Store, string, error) {
		path := filepath.Join(dir, sqliteFile)
		s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: path})
		return s, path, err
	})
}

func openSQLite(ctx context.Context, path string) (Driver, error) {
	s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: path})
	if err != nil {
		return nil, err
	}
	d := &sdkDriver{name: NameSQLite}
	return d, d.use(s, path)
}

// inFreshDirs is an SDK driver whose every measurement opens its store in a
// new directory under base, made by open.
func inFreshDirs(name, base string, open func(ctx context.Context, dir string) (*storage.Store, string, error)) Driver {
	var prev string
	d := &sdkDriver{name: name}
	d.fresh = func(ctx context.Context) (*storage.Store, string, error) {
		if prev != "" {
			// The last measurement's files go before the next one starts
			// (its store closed by Reset), so its cleanup is not measured
			// and the disk does not fill.
			_ = os.RemoveAll(prev)
		}
		dir, err := os.MkdirTemp(base, strings.TrimPrefix(name, "sdk-")+"-")
		if err != nil {
			return nil, "", err
		}
		prev = dir
		return open(ctx, dir)
	}
	d.cleanup = func() error {
		if prev != "" {
			return os.RemoveAll(prev)
		}
		return nil
	}
	return d
}

// Floor measures the store's own rate of durable writes: workers
// goroutines creating n distinct 512-byte values (create-only, as most of a
// job's writes are) in a fresh store, through the same adapter and with no
// queue logic. Divided by a job's writes it is the most jobs per second
// the store allows at that write count: the bound the issue compares to.
func (d *sdkDriver) Floor(ctx context.Context, n, workers int) (float64, error) {
	if err := d.Reset(ctx); err != nil {
		return 0, err
	}
	s, _ := d.current()
	body := make([]byte, 512)
	for i := range body {
		body[i] = 'x'
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && failed.Load() == nil; i = next.Add(1) {
				key := "floor/" + strconv.FormatInt(i%64, 10) + "/" + strconv.FormatInt(i, 10) + ".json"
				if _, err := s.Store.Put(ctx, key, body, storage.IfNotExists()); err != nil {
					failed.Store(&err)
				}
			}
		})
	}
	wg.Wait()
	if e := failed.Load(); e != nil {
		return 0, *e
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
