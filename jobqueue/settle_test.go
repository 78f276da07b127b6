package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// The queue on a store that settles (issue 27): a false not-found read of
// a job, or a create-only write accepted over an existing job, within the
// store's settle time of a disturbance. Nothing the queue cannot undo may
// rest on one such answer.
const settle = 10 * time.Second

// settlingQueue is a Queue over a fault store that settles in settle, its
// faults limited to the job records.
func settlingQueue(t *testing.T) (*jobqueue.Queue, *faultstore.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	fs := faultstore.New(memstore.New())
	fs.SetSettle(settle, clk.Now)
	fs.Match(func(k string) bool { return strings.HasPrefix(k, "jobs/") })
	return newQueue(t, storage.New(fs), clk), fs, clk
}

// runAll claims and runs every ready job, and returns the ids run.
func runAll(t *testing.T, q *jobqueue.Queue, h jobqueue.Handlers) []string {
	t.Helper()
	var ran []string
	for range 100 {
		c := claim(t, q, "w")
		if c == nil {
			return ran
		}
		ran = append(ran, c.Job().JobID)
		if _, err := c.Run(context.Background(), h); err != nil {
			t.Fatalf("run %s: %v", c.Job().JobID, err)
		}
	}
	return ran
}

// A sweep that read a waiting job as missing once deleted its lane entry,
// its only pointer: the job was never claimed.
func TestSettleSweepKeepsTheLaneOfAJobReadMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fs, clk := settlingQueue(t)
	enqueue(t, q, "job-1", "agent-a")
	clk.Advance(jobqueue.DefaultLeaseTTL) // its entry is no longer pending
	fs.Disturb()
	if r, err := q.Sweep(ctx); err != nil || r.Dropped != 0 {
		t.Fatalf("sweep in the disturbance: %+v, %v; want no entry dropped", r, err)
	}
	if fs.Faults().FalseNotFounds == 0 {
		t.Fatal("the sweep provoked no false not-found")
	}
	clk.Advance(settle)
	if r, err := q.Sweep(ctx); err != nil || r.Dropped != 0 {
		t.Fatalf("sweep after it settled: %+v, %v", r, err)
	}
	if ran := runAll(t, q, okHandlers()); len(ran) != 1 {
		t.Fatalf("ran %v after the disturbance; want job-1", ran)
	}
}

// The absence of a job truly gone is still believed, Settle later: its
// entry does not stay forever.
func TestSettleSweepDropsAnEntryWhoseJobStaysMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fs, clk := settlingQueue(t)
	enqueue(t, q, "job-1", "agent-a")
	if err := fs.Delete(ctx, "jobs/job-1.json", storageCond()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(jobqueue.DefaultLeaseTTL)
	if r, err := q.Sweep(ctx); err != nil || r.Dropped != 0 {
		t.Fatalf("first sweep: %+v, %v; one not-found is not evidence", r, err)
	}
	clk.Advance(settle)
	if r, err := q.Sweep(ctx); err != nil || r.Dropped != 1 {
		t.Fatalf("sweep Settle later: %+v, %v; want the entry dropped", r, err)
	}
}

// A claim whose pickup read the job as missing deleted its lane entry.
func TestSettleClaimKeepsTheLaneOfAJobReadMissing(t *testing.T) {
	t.Parallel()
	q, fs, clk := settlingQueue(t)
	enqueue(t, q, "job-1", "agent-a")
	clk.Advance(jobqueue.DefaultLeaseTTL)
	fs.Disturb()
	if c := claim(t, q, "w"); c != nil {
		t.Fatalf("claimed %s in the disturbance", c.Job().JobID)
	}
	if fs.Faults().FalseNotFounds == 0 {
		t.Fatal("the claim provoked no false not-found")
	}
	clk.Advance(settle)
	if ran := runAll(t, q, okHandlers()); len(ran) != 1 {
		t.Fatalf("ran %v after the disturbance; want job-1", ran)
	}
}

// A claim that read the orphan a free lock names as missing took the lock
// for the next job: the orphan, in a pipeline state, in no lane and named
// by no lock, was never rescued.
func TestSettleClaimRescuesAnOrphanReadMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fs, clk := settlingQueue(t)
	enqueue(t, q, "job-1", "agent-a")
	if c := claim(t, q, "w1"); c == nil { // its worker dies here
		t.Fatal("no claim")
	}
	clk.Advance(jobqueue.DefaultLeaseTTL + time.Second)
	enqueue(t, q, "job-2", "agent-a")
	q2 := newQueue(t, storage.New(fs), clk)
	fs.Match(func(k string) bool { return k == "jobs/job-1.json" })
	fs.Disturb()
	if c := claim(t, q2, "w2"); c != nil {
		if _, err := c.Run(ctx, okHandlers()); err != nil {
			t.Fatal(err)
		}
	}
	if fs.Faults().FalseNotFounds == 0 {
		t.Fatal("the claim provoked no false not-found")
	}
	clk.Advance(settle)
	for range 3 {
		if _, err := q2.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		runAll(t, q2, okHandlers())
		clk.Advance(time.Minute)
	}
	if j := get(t, q2, "job-1"); j.Status != lifecycle.JobComplete {
		t.Fatalf("job-1 is %s; want it rescued and run to COMPLETE", j.Status)
	}
}

// A job enqueued again under its id, while the store accepted the create
// over the completed job (and read it missing), ran a second time.
func TestSettleJobCreatedTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		disturb func(fs *faultstore.Store)
		exists  bool // the second Enqueue answers ErrJobExists
	}{
		{"create accepted over it", func(fs *faultstore.Store) { fs.AcceptCreateOver(1) }, true},
		{"read missing and create accepted", func(fs *faultstore.Store) { fs.Disturb() }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q, fs, clk := settlingQueue(t)
			var calls atomic.Int32
			h := okHandlers()
			call := h.CallNotebookLM
			h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
				calls.Add(1)
				return call(ctx, job, snap)
			}
			enqueue(t, q, "job-1", "agent-a")
			runAll(t, q, h)
			clk.Advance(time.Minute) // a client enqueues it again, later
			tt.disturb(fs)
			_, err := q.Enqueue(ctx, lifecycle.ActorGateway, spec("job-1", "agent-a"))
			if tt.exists != errors.Is(err, lifecycle.ErrJobExists) || (!tt.exists && err != nil) {
				t.Fatalf("second Enqueue: %v; want ErrJobExists %v", err, tt.exists)
			}
			fs.Calm()
			clk.Advance(settle)
			runAll(t, q, h)
			if n := calls.Load(); n != 1 {
				t.Fatalf("job-1 ran %d times; want once", n)
			}
			if !tt.exists && (fs.Faults().DoubleCreates == 0 || q.Quarantined() != 1) {
				t.Fatalf("%d double creates, %d quarantined; want the double create quarantined", fs.Faults().DoubleCreates, q.Quarantined())
			}
		})
	}
}

func storageCond() storage.Condition { return storage.Condition{} }

// An Enqueue that read an agent's lock as missing and whose create the
// store took over the lock reset its epoch to 0: the fencing token of the
// claim holding it went backwards.
func TestSettleAgentLockRemadeKeepsEpochsGrowing(t *testing.T) {
	t.Parallel()
	q, fs, clk := settlingQueue(t)
	enqueue(t, q, "job-1", "agent-a")
	c := claim(t, q, "w1")
	if c == nil {
		t.Fatal("no claim")
	}
	held := lockEpoch(t, storage.New(fs))
	clk.Advance(time.Second)
	fs.Match(func(k string) bool { return strings.HasPrefix(k, "queue/agents/") })
	fs.Disturb()
	enqueue(t, newQueue(t, storage.New(fs), clk), "job-2", "agent-a")
	if fs.Faults().DoubleCreates != 1 {
		t.Fatalf("%d double creates; the test provoked none", fs.Faults().DoubleCreates)
	}
	fs.Calm()
	if got := lockEpoch(t, storage.New(fs)); got <= held {
		t.Fatalf("lock epoch %d after it was remade over epoch %d; epochs must only grow", got, held)
	}
}

func lockEpoch(t *testing.T, s *storage.Store) int64 {
	t.Helper()
	b, _, err := s.Get(context.Background(), "queue/agents/agent-a.json")
	if err != nil {
		t.Fatal(err)
	}
	var l struct{ Epoch int64 }
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l.Epoch
}

// The care costs nothing on a store that settles at once, and on one that
// settles it costs three reads per job: Enqueue's read of the id, the
// pickup's read of the artifact, and the fenced artifact write's read
// before its create. No waits: the clock never moves here.
func TestSettleCostsNothingOnAStoreThatSettlesAtOnce(t *testing.T) {
	t.Parallel()
	const jobs = 20
	calls := map[time.Duration]int64{}
	for _, d := range []time.Duration{0, settle} {
		clk := clock.NewFake(t0)
		fs := faultstore.New(memstore.New())
		fs.SetSettle(d, clk.Now)
		cs := &teststores.Counting{Store: fs}
		q := newQueue(t, storage.New(cs), clk)
		for i := range jobs {
			enqueue(t, q, fmt.Sprintf("job-%04d", i), fmt.Sprintf("agent-%d", i%4))
		}
		if ran := runAll(t, q, okHandlers()); len(ran) != jobs {
			t.Fatalf("settle %v: ran %d of %d jobs", d, len(ran), jobs)
		}
		if _, err := q.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		calls[d] = cs.Total()
	}
	if extra := calls[settle] - calls[0]; extra != 3*jobs {
		t.Fatalf("a store that settles took %d calls more than one that settles at once (%d); want %d, three reads a job", extra, calls[0], 3*jobs)
	}
}

// The queue through disturbances of a store that settles: two workers,
// jobs enqueued twice under their ids, sweeps and claims inside windows of
// false not-founds and creates taken over existing jobs. Every job
// completes and each handler runs once per job; a job created again over
// its completed record is quarantined, not run again. The test fails if
// the store injected no fault.
func TestSettleEveryJobCompletesOnceThroughDisturbances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	fs := faultstore.New(memstore.New())
	fs.SetSettle(settle, clk.Now)
	fs.Match(func(k string) bool { return strings.HasPrefix(k, "jobs/") || strings.HasPrefix(k, "queue/") })
	queues := []*jobqueue.Queue{newQueue(t, storage.New(fs), clk), newQueue(t, storage.New(fs), clk)}
	var mu sync.Mutex
	calls := map[string]int{}
	h := okHandlers()
	call := h.CallNotebookLM
	h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
		mu.Lock()
		calls[job.JobID]++
		mu.Unlock()
		return call(ctx, job, snap)
	}
	const jobs = 24
	id := func(i int) string { return fmt.Sprintf("job-%02d", i) }
	for i := range jobs {
		q := queues[i%2]
		if i%6 == 0 {
			fs.Disturb() // this enqueue and the next ones run in a window
		}
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, spec(id(i), fmt.Sprintf("agent-%d", i%4))); err != nil {
			t.Fatalf("enqueue %s: %v", id(i), err)
		}
		clk.Advance(time.Second)
	}
	disturbedRounds(t, fs, clk, queues, h, jobs, id)
	fs.Calm()
	clk.Advance(time.Hour)
	for range 4 { // settled: the rest runs
		if _, err := queues[0].Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		runAll(t, queues[0], h)
		clk.Advance(time.Minute)
	}
	if fs.Faults().FalseNotFounds == 0 || fs.Faults().DoubleCreates == 0 {
		t.Fatalf("the store injected %d false not-founds and %d double creates; want both", fs.Faults().FalseNotFounds, fs.Faults().DoubleCreates)
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for i := range jobs {
		j, err := queues[0].Get(ctx, lifecycle.ActorAdmin, id(i))
		var qe *lifecycle.QuarantinedError
		switch {
		case errors.As(err, &qe) && strings.HasPrefix(qe.Reason, "created twice"):
			twice++ // it completed, then was created again over its record
		case err != nil || j.Status != lifecycle.JobComplete:
			t.Errorf("%s: %s, %v; want COMPLETE", id(i), j.Status, err)
		}
		if calls[id(i)] != 1 {
			t.Errorf("%s: its handler ran %d times; want once", id(i), calls[id(i)])
		}
	}
	t.Logf("%d false not-founds, %d double creates, %d jobs created over a completed one and quarantined", fs.Faults().FalseNotFounds, fs.Faults().DoubleCreates, twice)
}

// disturbedRounds is 40 rounds of TestSettleEveryJobCompletesOnceThroughDisturbances
// on queues by turns, the store disturbed every fifth: a job enqueued again
// under its id every third, a sweep, and claims run until none is found.
func disturbedRounds(t *testing.T, fs *faultstore.Store, clk *clock.Fake, queues []*jobqueue.Queue, h jobqueue.Handlers, jobs int, id func(int) string) {
	t.Helper()
	ctx := context.Background()
	for round := 0; round < 40; round++ {
		q := queues[round%2]
		if round%5 == 0 {
			fs.Disturb()
		}
		if round%3 == 0 {
			// A client enqueues a job again under its id.
			_, _ = q.Enqueue(ctx, lifecycle.ActorGateway, spec(id(round%jobs), fmt.Sprintf("agent-%d", round%4)))
		}
		if _, err := q.Sweep(ctx); err != nil {
			t.Fatalf("sweep: %v", err)
		}
		for range jobs {
			c, err := q.Claim(ctx, fmt.Sprint("w", round%2))
			if err != nil || c == nil {
				break
			}
			if _, err := c.Run(ctx, h); err != nil {
				t.Fatalf("run %s: %v", c.Job().JobID, err)
			}
		}
		clk.Advance(4 * time.Second)
	}
}
