package jobqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// committing counts the writes a committing store serves: Puts, Deletes
// and Commits. before, when set, runs ahead of each Commit (another
// process's write); lose makes the next Commit land and then answer a
// transient failure, as one whose answer was lost; drop makes it answer
// that failure without landing.
type committing struct {
	driver.Store
	puts, deletes, commits atomic.Int64
	before                 func(n int64)
	lose, drop             atomic.Bool
}

func newCommitting() *committing { return &committing{Store: memstore.New()} }

func (c *committing) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	c.puts.Add(1)
	return c.Store.Put(ctx, key, value, cond)
}

func (c *committing) Delete(ctx context.Context, key string, cond storage.Condition) error {
	c.deletes.Add(1)
	return c.Store.Delete(ctx, key, cond)
}

func (c *committing) Commit(ctx context.Context, writes []storage.Write) ([]storage.Version, error) {
	n := c.commits.Add(1)
	if c.before != nil {
		c.before(n)
	}
	if c.drop.CompareAndSwap(true, false) {
		return nil, &storage.OpError{Op: "commit", Cause: syscall.ECONNRESET}
	}
	vs, err := c.Store.(driver.Committer).Commit(ctx, writes)
	if err == nil && c.lose.CompareAndSwap(true, false) {
		return nil, &storage.OpError{Op: "commit", Cause: syscall.ECONNRESET}
	}
	return vs, err
}

func batchOf(n int, agents ...string) []jobqueue.NewJob {
	out := make([]jobqueue.NewJob, n)
	for i := range out {
		out[i] = spec(fmt.Sprintf("job-%03d", i), agents[i%len(agents)])
	}
	return out
}

// laneIDs lists the job ids in agent's lane, in lane order.
func laneIDs(t *testing.T, s *storage.Store, agent string) []string {
	t.Helper()
	var ids []string
	for key, err := range s.List(context.Background(), layout.LanesPrefix+agent+"/") {
		if err != nil {
			t.Fatal(err)
		}
		_, _, id, _ := layout.ParseLaneKey(key)
		ids = append(ids, id)
	}
	return ids
}

// TestEnqueueManyIsOneCommit: on a store that commits, a batch of jobs of
// new agents costs one commit and no other write (locks, lanes and
// records together), and a second batch one more; the jobs are readable
// and each agent's lane holds its jobs in the batch's order.
func TestEnqueueManyIsOneCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCommitting()
	s := storage.New(c)
	q := newQueue(t, s, clock.NewFake(t0))
	jobs, err := q.InsertMany(ctx, batchOf(60, "a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	if got := [3]int64{c.commits.Load(), c.puts.Load(), c.deletes.Load()}; got != [3]int64{1, 0, 0} {
		t.Fatalf("60 jobs of 3 new agents cost %d commits, %d puts, %d deletes; want 1 commit and nothing else", got[0], got[1], got[2])
	}
	if len(jobs) != 60 || jobs[59].JobID != "job-059" || jobs[59].Status != lifecycle.JobQueued {
		t.Fatalf("answer: %d jobs, last %+v", len(jobs), jobs[len(jobs)-1])
	}
	if j := get(t, q, "job-031"); j.Status != lifecycle.JobQueued || j.AgentSlug != "b" {
		t.Fatalf("job-031 reads %s of %s", j.Status, j.AgentSlug)
	}
	var want []string
	for i := 1; i < 60; i += 3 {
		want = append(want, fmt.Sprintf("job-%03d", i))
	}
	if got := laneIDs(t, s, "b"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("lane b = %v, want the batch's order %v", got, want)
	}
	more := batchOf(80, "a", "d")[60:]
	if _, err := q.InsertMany(ctx, more); err != nil {
		t.Fatal(err)
	}
	if n := c.commits.Load(); n != 2 || c.puts.Load() != 0 {
		t.Fatalf("a second batch: %d commits, %d puts in all; want 2 and 0", n, c.puts.Load())
	}
	// Claims see the jobs: the first of lane a is the batch's first.
	if cl := claim(t, q, "w1"); cl == nil || cl.Job().JobID != "job-000" {
		t.Fatalf("first claim = %v, want job-000", cl)
	}
}

// TestEnqueueManyAllOrNothing: on a store that commits, a batch that fails
// writes nothing, and the error names the job at fault.
func TestEnqueueManyAllOrNothing(t *testing.T) {
	t.Parallel()
	bad := func(i int, f func(*jobqueue.NewJob)) func([]jobqueue.NewJob) []jobqueue.NewJob {
		return func(js []jobqueue.NewJob) []jobqueue.NewJob { f(&js[i]); return js }
	}
	tests := []struct {
		name  string
		actor lifecycle.Actor
		edit  func([]jobqueue.NewJob) []jobqueue.NewJob
		index int // -1: no *BatchError
		want  error
	}{
		{"an invalid job", lifecycle.ActorGateway, bad(3, func(n *jobqueue.NewJob) { n.MaxAttempts = 101 }), 3, lifecycle.ErrInvalidJob},
		{"an unknown type", lifecycle.ActorGateway, bad(4, func(n *jobqueue.NewJob) { n.JobType = "NOPE" }), 4, lifecycle.ErrInvalidJob},
		{"an id twice", lifecycle.ActorGateway, bad(5, func(n *jobqueue.NewJob) { n.JobID = "job-001" }), 5, lifecycle.ErrInvalidJob},
		{"an id that exists", lifecycle.ActorGateway, bad(2, func(n *jobqueue.NewJob) { n.JobID = "old" }), 2, lifecycle.ErrJobExists},
		{"over the cap", lifecycle.ActorGateway, func([]jobqueue.NewJob) []jobqueue.NewJob { return batchOf(10001, "a") }, -1, lifecycle.ErrInvalidJob},
		{"an actor who may not", lifecycle.ActorFrontend, func(js []jobqueue.NewJob) []jobqueue.NewJob { return js }, -1, lifecycle.ErrForbiddenActor},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := newCommitting()
			s := storage.New(c)
			q := newQueue(t, s, clock.NewFake(t0))
			enqueue(t, q, "old", "a")
			before := teststores.Snapshot(t, s)
			jobs, err := q.EnqueueMany(ctx, tt.actor, tt.edit(batchOf(8, "a", "new")))
			if !errors.Is(err, tt.want) || len(jobs) != 0 {
				t.Fatalf("EnqueueMany = %d jobs, %v; want none and %v", len(jobs), err, tt.want)
			}
			be, isBatch := errors.AsType[*lifecycle.BatchError](err)
			switch {
			case tt.index < 0 && isBatch:
				t.Fatalf("a refusal of the whole batch names job %d: %v", be.Index, err)
			case tt.index >= 0 && (!isBatch || be.Index != tt.index):
				t.Fatalf("error %v; want a *BatchError naming job %d", err, tt.index)
			}
			teststores.Unchanged(t, s, before)
		})
	}
}

// TestEnqueueManyAtTheCap: 500 jobs are 1,000 writes, a commit's most:
// the locks of new agents go first, in a commit of their own; once the
// locks exist, 500 jobs are one commit.
func TestEnqueueManyAtTheCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCommitting()
	s := storage.New(c)
	q := newQueue(t, s, clock.NewFake(t0))
	if _, err := q.InsertMany(ctx, batchOf(500, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if n := c.commits.Load(); n != 2 {
		t.Fatalf("500 jobs of 2 new agents: %d commits, want 2 (the locks, the jobs)", n)
	}
	more := batchOf(500, "a", "b")
	for i := range more {
		more[i].JobID = fmt.Sprintf("more-%03d", i)
	}
	if _, err := q.InsertMany(ctx, more); err != nil {
		t.Fatal(err)
	}
	if n := c.commits.Load(); n != 3 || c.puts.Load() != 0 {
		t.Fatalf("500 more: %d commits, %d puts in all; want 3 and 0", n, c.puts.Load())
	}
	if got := laneIDs(t, s, "b"); len(got) != 500 {
		t.Fatalf("lane b holds %d jobs, want 500", len(got))
	}
}

// TestEnqueueManyEmpty: no jobs is no error and no write.
func TestEnqueueManyEmpty(t *testing.T) {
	t.Parallel()
	c := newCommitting()
	q := newQueue(t, storage.New(c), clock.NewFake(t0))
	if jobs, err := q.InsertMany(context.Background(), nil); err != nil || len(jobs) != 0 || c.commits.Load() != 0 {
		t.Fatalf("no jobs = %v, %v, %d commits", jobs, err, c.commits.Load())
	}
}

// TestEnqueueManyLockRace: an agent's lock another process makes between
// the batch's read of it and its commit is left as made, and the batch
// committed again without it.
func TestEnqueueManyLockRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCommitting()
	key, _ := layout.AgentLockKey("a")
	c.before = func(n int64) {
		if n == 1 {
			if _, err := c.Store.Put(ctx, key, []byte(`{"agent":"a","epoch":7,"_v":1}`), storage.IfNotExists()); err != nil {
				t.Error(err)
			}
		}
	}
	s := storage.New(c)
	q := newQueue(t, s, clock.NewFake(t0))
	if _, err := q.InsertMany(ctx, batchOf(4, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if n := c.commits.Load(); n != 2 {
		t.Fatalf("%d commits; want 2 (the first refused at the lock)", n)
	}
	b, _, err := s.Get(ctx, key)
	if err != nil || string(b) != `{"agent":"a","epoch":7,"_v":1}` {
		t.Fatalf("the other process's lock = %s, %v; want it untouched", b, err)
	}
	if got := laneIDs(t, s, "a"); len(got) != 2 {
		t.Fatalf("lane a = %v", got)
	}
}

// TestEnqueueManyLockRaceMany: another process made most of a batch's
// 40 agents' locks after the batch read them as missing; the batch learns
// them all at its first refusal, so it commits twice, not once per lock
// (a benchmark of 16 processes' batches over 256 agents saw 45 refused
// commits a batch before).
func TestEnqueueManyLockRaceMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCommitting()
	agents := make([]string, 40)
	for i := range agents {
		agents[i] = fmt.Sprintf("agent-%02d", i)
	}
	c.before = func(n int64) {
		if n != 1 {
			return
		}
		for _, a := range agents[:30] {
			key, _ := layout.AgentLockKey(a)
			if _, err := c.Store.Put(ctx, key, []byte(`{"agent":"`+a+`","_v":1}`), storage.IfNotExists()); err != nil {
				t.Error(err)
			}
		}
	}
	q := newQueue(t, storage.New(c), clock.NewFake(t0))
	if _, err := q.InsertMany(ctx, batchOf(80, agents...)); err != nil {
		t.Fatal(err)
	}
	if n := c.commits.Load(); n != 2 {
		t.Fatalf("%d commits; want 2 (one refused at a lock, then all the others known)", n)
	}
}

// TestEnqueueManyLostAnswer: a commit that landed but whose answer was
// lost is retried by the store, which then finds its keys taken
// (outcome unknown); the queue reads a record, finds it its own and
// answers success, every job written once.
func TestEnqueueManyLostAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCommitting()
	c.lose.Store(true)
	s := storage.New(c)
	q := newQueue(t, s, clock.Real()) // the store's retry waits 50 ms of the clock
	jobs, err := q.InsertMany(ctx, batchOf(5, "a"))
	if err != nil || len(jobs) != 5 {
		t.Fatalf("InsertMany after a lost answer = %d jobs, %v; want all 5", len(jobs), err)
	}
	if got := laneIDs(t, s, "a"); len(got) != 5 || c.commits.Load() != 2 {
		t.Fatalf("lane a = %v after %d commits; want 5 jobs, 2 commits (the lost one and its retry)", got, c.commits.Load())
	}
	// A batch whose commit failed without landing, and whose retry then
	// meets a job that exists: the queue reads that none landed, commits
	// again and learns which job stands in the way.
	c.drop.Store(true)
	again := batchOf(7, "a")[5:]
	again[1].JobID = "job-002"
	before := teststores.Snapshot(t, s)
	_, err = q.InsertMany(ctx, again)
	if be, ok := errors.AsType[*lifecycle.BatchError](err); !ok || be.Index != 1 || !errors.Is(err, lifecycle.ErrJobExists) {
		t.Fatalf("a batch over an existing id = %v; want a *BatchError naming job 1, JOB_EXISTS", err)
	}
	if n := c.commits.Load(); n != 5 {
		t.Fatalf("%d commits; want 5 (dropped, retried: outcome unknown, again: refused)", n)
	}
	teststores.Unchanged(t, s, before)
}

// TestEnqueueManyOneByOne: on a store that cannot commit several writes
// (filestore) the jobs are written in order and the first failure stops
// the batch: the jobs before it landed and are returned, the error names
// it, the later ones were not tried. A job invalid anywhere still stops
// the batch before any write.
func TestEnqueueManyOneByOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fileStore(t)
	if s.CanCommit() {
		t.Fatal("filestore commits: this test needs a store that does not")
	}
	q := newQueue(t, s, clock.NewFake(t0))
	enqueue(t, q, "job-002", "a")
	jobs, err := q.InsertMany(ctx, batchOf(5, "a", "b"))
	be, ok := errors.AsType[*lifecycle.BatchError](err)
	if !ok || be.Index != 2 || !errors.Is(err, lifecycle.ErrJobExists) {
		t.Fatalf("InsertMany over job-002 = %v; want a *BatchError naming job 2, JOB_EXISTS", err)
	}
	if len(jobs) != 2 || jobs[0].JobID != "job-000" || jobs[1].JobID != "job-001" {
		t.Fatalf("landed = %v; want job-000 and job-001", jobs)
	}
	for id, want := range map[string]bool{"job-000": true, "job-001": true, "job-003": false, "job-004": false} {
		_, err := q.Get(ctx, lifecycle.ActorAdmin, id)
		if landed := err == nil; landed != want {
			t.Errorf("%s landed %v, want %v (%v)", id, landed, want, err)
		}
	}
	before := teststores.Snapshot(t, s)
	bad := batchOf(10, "a")[5:]
	bad[3].Payload = []byte(`{"unclosed"`)
	if jobs, err := q.InsertMany(ctx, bad); len(jobs) != 0 || !errors.Is(err, lifecycle.ErrInvalidJob) {
		t.Fatalf("a batch with an invalid job = %d jobs, %v", len(jobs), err)
	}
	teststores.Unchanged(t, s, before)
}

// BenchmarkEnqueueMany: a batch of 100 jobs of 4 agents against 100
// Enqueues, on memstore (one commit against 200 puts); the cost per job.
func BenchmarkEnqueueMany(b *testing.B) {
	for _, many := range []bool{false, true} {
		b.Run(map[bool]string{false: "one-by-one", true: "batch"}[many], func(b *testing.B) {
			ctx := context.Background()
			q := newQueue(b, memstore.New(), clock.Real())
			b.ReportAllocs()
			for n := 0; b.Loop(); n++ {
				jobs := batchOf(100, "a", "b", "c", "d")
				for i := range jobs {
					jobs[i].JobID = fmt.Sprintf("j%d-%d", n, i)
				}
				if many {
					if _, err := q.InsertMany(ctx, jobs); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for _, j := range jobs {
					if _, err := q.Enqueue(ctx, lifecycle.ActorOrchestration, j); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/job")
		})
	}
}

// TestJobCommits: where the store commits, a job is three commits:
// Enqueue's lane entry and record (and a new agent's lock), the pickup's
// agent lock, record and lane entry's delete, and the end's artifact,
// record (COMPLETE) and audit object; a duplicate id is ErrJobExists
// alone, as on every store. Elsewhere the same writes go one at a time. (A claim taken outside a Worker stores CONTEXT_ASSEMBLY, so a
// job is 9 writes here, a Worker's 8.)
func TestJobCommits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sc              storeCase
		commits, writes int64 // of a job of a known agent, enqueued and run
		newAgent        int64 // Enqueue's commits for a new agent
	}{
		{stores[0], 3, 9, 1},
		{storeCase{"filestore", fileStore}, 0, 9, 0},
	} {
		t.Run(tc.sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cs := &teststores.Counting{Store: tc.sc.new(t)}
			q := newQueue(t, storage.New(cs), clock.NewFake(t0))
			enqueue(t, q, "job-0", "agent")
			if got := cs.Commits.Load(); got != tc.newAgent || cs.Puts.Load() != 3 {
				t.Fatalf("first Enqueue: %d commits, %d puts; want %d and 3 (lock, lane entry, record)", got, cs.Puts.Load(), tc.newAgent)
			}
			_, err := q.Enqueue(ctx, lifecycle.ActorGateway, spec("job-0", "agent"))
			if _, batch := errors.AsType[*lifecycle.BatchError](err); !errors.Is(err, lifecycle.ErrJobExists) || batch {
				t.Fatalf("Enqueue of an existing id: %v, want ErrJobExists alone", err)
			}
			c := claim(t, q, "w")
			if _, err := c.Run(ctx, noopHandlers); err != nil {
				t.Fatal(err)
			}
			cs.Reset()
			enqueue(t, q, "job-1", "agent")
			c = claim(t, q, "w")
			if j, err := c.Run(ctx, noopHandlers); err != nil || j.Status != lifecycle.JobComplete {
				t.Fatalf("run: %v, %v", j.Status, err)
			}
			writes := cs.Puts.Load() + cs.Deletes.Load()
			if got := cs.Commits.Load(); got != tc.commits || writes != tc.writes {
				t.Fatalf("a job: %d commits, %d writes (%d puts); want %d and %d", got, writes, cs.Puts.Load(), tc.commits, tc.writes)
			}
		})
	}
}
