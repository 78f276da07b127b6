package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// TestDelayedJobStartsNoEarlierThanItsTime: a job enqueued with a run time
// (RunAt, Delay, both: the later) is QUEUED with scheduled_at, no claim
// picks it up a nanosecond before that time, and the first claim at it
// does; a run time already past, or none, is at once.
func TestDelayedJobStartsNoEarlierThanItsTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		runAt time.Time
		delay time.Duration
		want  time.Duration // after t0; 0: at once, no scheduled_at
	}{
		{name: "delay", delay: 10 * time.Second, want: 10 * time.Second},
		{name: "run at", runAt: t0.Add(time.Minute), want: time.Minute},
		{name: "run at in another zone", runAt: t0.Add(time.Minute).In(time.FixedZone("X", 3600)), want: time.Minute},
		{name: "both, the delay later", runAt: t0.Add(30 * time.Second), delay: time.Minute, want: time.Minute},
		{name: "both, run at later", runAt: t0.Add(2 * time.Minute), delay: time.Minute, want: 2 * time.Minute},
		{name: "run at past", runAt: t0.Add(-time.Hour)},
		{name: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			q := newQueue(t, memstore.New(), clk)
			n := spec("job-1", "agent-a")
			n.RunAt, n.Delay = tt.runAt, tt.delay
			j, err := q.Enqueue(ctx, lifecycle.ActorGateway, n)
			if err != nil {
				t.Fatal(err)
			}
			due := t0.Add(tt.want)
			if j.Status != lifecycle.JobQueued || (j.ScheduledAt != nil) != (tt.want > 0) || j.ScheduledAt != nil && !j.ScheduledAt.Equal(due) {
				t.Fatalf("enqueued %s, scheduled_at %v; want QUEUED at %v", j.Status, j.ScheduledAt, due)
			}
			if got := get(t, q, "job-1"); !slices.Equal(jsonOf(t, got.ScheduledAt), jsonOf(t, j.ScheduledAt)) {
				t.Fatalf("stored scheduled_at %v, answered %v", got.ScheduledAt, j.ScheduledAt)
			}
			if tt.want > 0 {
				// Idle claims all along, the last a nanosecond early.
				for _, at := range []time.Time{t0, t0.Add(tt.want / 2), due.Add(-time.Nanosecond)} {
					clk.Advance(at.Sub(clk.Now()))
					if c := claim(t, q, "w"); c != nil {
						t.Fatalf("claimed at %v, before its time %v", clk.Now(), due)
					}
				}
				clk.Advance(time.Nanosecond)
			}
			c := claim(t, q, "w")
			if c == nil || c.Job().JobID != "job-1" {
				t.Fatalf("at %v claimed %v, want job-1", clk.Now(), c)
			}
			if j, err := c.Run(ctx, okHandlers()); err != nil || j.Status != lifecycle.JobComplete {
				t.Fatalf("ran to %s, %v", j.Status, err)
			}
		})
	}
}

func jsonOf(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPriorityOrder: within one agent's lane a higher priority starts
// first, one inserted later included; jobs of one priority start in the
// order they became ready; a delayed job of a higher priority does not
// hold up the ready ones behind it; a retry keeps its priority.
func TestPriorityOrder(t *testing.T) {
	t.Parallel()
	type job = priorityJob
	tests := []struct {
		name string
		jobs []job // enqueued 1 ms apart, in this order
		want []string
	}{
		{"higher inserted later starts first", []job{{"a", 0, 0}, {"b", 5, 0}, {"c", 9, 0}}, []string{"c", "a", "b"}},
		{"fifo within one priority", []job{{"z", 7, 0}, {"y", 7, 0}, {"x", 7, 0}}, []string{"z", "y", "x"}},
		{"every band", []job{{"p1", 1, 0}, {"p4", 4, 0}, {"p5", 0, 0}, {"p6", 6, 0}, {"p9", 9, 0}, {"p2", 2, 0}, {"p8", 8, 0}},
			[]string{"p9", "p8", "p6", "p5", "p4", "p2", "p1"}},
		{"a delayed higher priority waits, the ready ones run", []job{{"late", 9, time.Minute}, {"a", 5, 0}, {"b", 1, 0}},
			[]string{"a", "b", "late"}},
		{"a delayed job joins its priority at its time", []job{{"late", 5, time.Second}, {"a", 5, 0}, {"hi", 8, 2 * time.Second}},
			[]string{"a", "late", "hi"}},
	}
	// Every store lists in byte order: memstore, a directory, SQLite, S3
	// (MinIO).
	for _, tt := range tests {
		for _, sc := range faultStores(true) {
			t.Run(tt.name+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				runPriorityCase(t, sc.new(t), tt.jobs, tt.want)
			})
		}
	}
}

// priorityJob is a job of TestPriorityOrder.
type priorityJob struct {
	id       string
	priority int
	delay    time.Duration
}

// runPriorityCase enqueues jobs 1 ms apart on s and checks they start in
// the order want.
func runPriorityCase(t *testing.T, s *storage.Store, jobs []priorityJob, want []string) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	q := newQueue(t, s, clk)
	for _, j := range jobs {
		n := spec(j.id, "agent-a")
		n.Priority, n.Delay = j.priority, j.delay
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, n); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	}
	if got := runInOrder(t, q, clk, len(jobs)); !slices.Equal(got, want) {
		t.Fatalf("started %v, want %v", got, want)
	}
}

// runInOrder claims and runs n jobs, moving the clock on a second whenever
// no job is ready, and returns their ids in the order they started.
func runInOrder(t *testing.T, q *jobqueue.Queue, clk *clock.Fake, n int) []string {
	t.Helper()
	var got []string
	for tries := 0; len(got) < n && tries < 1000; tries++ {
		c := claim(t, q, "w")
		if c == nil {
			clk.Advance(time.Second)
			continue
		}
		got = append(got, c.Job().JobID)
		if j, err := c.Run(context.Background(), okHandlers()); err != nil || j.Status != lifecycle.JobComplete {
			t.Fatalf("%s ran to %s, %v", c.Job().JobID, j.Status, err)
		}
	}
	return got
}

// TestRetryKeepsItsPriority: a job of priority 8 that failed is laned
// again at 8: after its backoff it starts before a job of the default
// priority that was ready before it.
func TestRetryKeepsItsPriority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	q := newQueue(t, memstore.New(), clk)
	n := spec("hi", "agent-a")
	n.Priority = 8
	if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, n); err != nil {
		t.Fatal(err)
	}
	var calls callCount
	j, err := claim(t, q, "w").Run(ctx, failingOnce(&calls))
	if err != nil || j.Status != lifecycle.JobRetryBackoff || j.Priority != 8 {
		t.Fatalf("first attempt: %s priority %d, %v", j.Status, j.Priority, err)
	}
	enqueue(t, q, "default", "agent-a") // ready now, the retry in 15 s
	clk.Advance(time.Minute)
	c := claim(t, q, "w")
	if c == nil || c.Job().JobID != "hi" {
		t.Fatalf("claimed %v, want the retry of priority 8", c)
	}
}

type callCount struct {
	mu sync.Mutex
	n  int
}

// failingOnce is okHandlers whose first CallNotebookLM fails.
func failingOnce(n *callCount) jobqueue.Handlers {
	h := okHandlers()
	ok := h.CallNotebookLM
	h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
		n.mu.Lock()
		n.n++
		first := n.n == 1
		n.mu.Unlock()
		if first {
			return lifecycle.JobOutput{}, errors.New("boom")
		}
		return ok(ctx, job, snap)
	}
	return h
}

// TestPreviousReleaseLaneEntry: the lane key of a job of the default
// priority is byte for byte the previous release's ({ready as 19-digit
// Unix ns}-{job}); an entry written in that format, with a record that
// has no priority (as that release wrote both), sorts as the default
// priority among new entries and is claimed.
func TestPreviousReleaseLaneEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := memstore.New()
	q := newQueue(t, s, clk)
	old := enqueue(t, q, "old", "agent-a")
	if want := fmt.Sprintf("queue/lanes/agent-a/%019d-old", t0.UnixNano()); old.ReadyKey != want {
		t.Fatalf("default-priority lane key %q, want the previous release's %q", old.ReadyKey, want)
	}
	raw, _, err := s.Get(ctx, "jobs/old.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if _, has := rec["priority"]; has {
		t.Fatalf("a default-priority record holds a priority: %s", raw)
	}
	if _, has := rec["scheduled_at"]; has {
		t.Fatalf("a job to run at once holds a scheduled_at: %s", raw)
	}
	for _, j := range []struct {
		id string
		p  int
	}{{"low", 4}, {"high", 6}} {
		n := spec(j.id, "agent-a")
		n.Priority = j.p
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, n); err != nil {
			t.Fatal(err)
		}
	}
	// A second Queue, as a process started after the upgrade, lists the
	// lane afresh.
	if got := runInOrder(t, newQueue(t, s, clk), clk, 3); !slices.Equal(got, []string{"high", "old", "low"}) {
		t.Fatalf("started %v, want high, old, low", got)
	}
}

// TestDelayedJobIdleWorker: a Worker with idle slots on the fake clock
// starts a delayed job at its time, not before, while it runs a ready job
// of another agent at once.
func TestDelayedJobIdleWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	clk := clock.NewFake(t0)
	// Its idle loops wake for the agents' orphan checks (LeaseTTL/2) and
	// their polls: every 5 min.
	q := newQueue(t, memstore.New(), clk, func(c *jobqueue.Config) { c.LeaseTTL = 10 * time.Minute })
	var mu sync.Mutex
	started := map[string]time.Time{}
	h := okHandlers()
	ok := h.CallNotebookLM
	h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
		mu.Lock()
		started[job.JobID] = clk.Now()
		mu.Unlock()
		return ok(ctx, job, snap)
	}
	late := spec("late", "agent-a")
	late.Delay = time.Hour
	if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, late); err != nil {
		t.Fatal(err)
	}
	enqueue(t, q, "now", "agent-b")
	w := &jobqueue.Worker{Queue: q, ID: "w1", Slots: 2, Handlers: h, SweepInterval: -1, PollInterval: 5 * time.Minute}
	done := make(chan error, 1)
	waiting := clk.WaitForTimers(1) // the Worker's first wait: it has started
	go func() { done <- w.Run(ctx) }()
	<-waiting
	for range 100 {
		if get(t, q, "late").Status == lifecycle.JobComplete {
			break
		}
		if _, _, err := clk.AdvanceToNext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if at, ok := started["now"]; !ok || !at.Equal(t0) {
		t.Errorf("the ready job started at %v (%v), want at once", at, ok)
	}
	if at, ok := started["late"]; !ok || at.Before(t0.Add(time.Hour)) || at.After(t0.Add(time.Hour+time.Second)) {
		t.Errorf("the delayed job started at %v (%v), want at %v", at, ok, t0.Add(time.Hour))
	}
}

// TestDelayedJobIdleCost: an agent whose lane holds only delayed jobs (of
// several priorities) costs what an agent with no job costs: between the
// whole-queue listings (one per 200 ms) no read, no write and no listing
// of its own, until a job's time or its lock's orphan check comes.
func TestDelayedJobIdleCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cost := func(delayed bool) (lists, others int64) {
		cs := &teststores.Counting{Store: memstore.New()}
		clk := clock.NewFake(t0)
		q := newQueue(t, storage.New(cs), clk)
		enqueue(t, q, "ran", "agent-a") // the agent exists, its lock too
		if c := claim(t, q, "w"); c == nil {
			t.Fatal("no claim")
		} else if _, err := c.Run(ctx, okHandlers()); err != nil {
			t.Fatal(err)
		}
		if delayed {
			for i, p := range []int{9, 5, 1} {
				n := spec(fmt.Sprintf("late-%d", i), "agent-a")
				n.Priority, n.Delay = p, time.Hour
				if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, n); err != nil {
					t.Fatal(err)
				}
			}
		}
		claim(t, q, "w") // settles the kept lock, lists the lane
		cs.Reset()
		for range 100 { // 5 s in 50 ms steps
			clk.Advance(50 * time.Millisecond)
			if c := claim(t, q, "w"); c != nil {
				t.Fatalf("claimed %s", c.Job().JobID)
			}
		}
		return cs.Lists.Load(), cs.Gets.Load() + cs.Puts.Load() + cs.Deletes.Load()
	}
	idleLists, idleOther := cost(false)
	lists, other := cost(true)
	if other != 0 || idleOther != 0 || lists != idleLists || lists > 2*5000/200 {
		t.Fatalf("5 s of claims cost %d listings and %d other calls with delayed jobs, %d and %d without; want the same listings (about one per 200 ms) and no other call",
			lists, other, idleLists, idleOther)
	}
}

// TestEnqueueRefusesBadSchedule: a priority outside 1..9 (0 is the
// default), a negative delay or one past 100 years, and a run time past
// 2200 are ErrInvalidJob, and nothing is written.
func TestEnqueueRefusesBadSchedule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(*jobqueue.NewJob)
	}{
		{"priority 10", func(n *jobqueue.NewJob) { n.Priority = 10 }},
		{"priority -1", func(n *jobqueue.NewJob) { n.Priority = -1 }},
		{"negative delay", func(n *jobqueue.NewJob) { n.Delay = -time.Second }},
		{"delay of 200 years", func(n *jobqueue.NewJob) { n.Delay = 200 * 365 * 24 * time.Hour }},
		{"run at 2263", func(n *jobqueue.NewJob) { n.RunAt = time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			q := newQueue(t, s, clock.NewFake(t0))
			n := spec("job-1", "agent-a")
			tt.mod(&n)
			if _, err := q.Enqueue(context.Background(), lifecycle.ActorGateway, n); !errors.Is(err, lifecycle.ErrInvalidJob) {
				t.Fatalf("Enqueue: %v, want ErrInvalidJob", err)
			}
			if _, err := q.EnqueueMany(context.Background(), lifecycle.ActorGateway, []jobqueue.NewJob{spec("ok", "agent-a"), n}); !errors.Is(err, lifecycle.ErrInvalidJob) {
				t.Fatalf("EnqueueMany: %v, want ErrInvalidJob", err)
			}
			if k := countKeys(t, s, ""); k != 0 {
				t.Fatalf("%d keys written", k)
			}
		})
	}
}

// TestEnqueueManySchedules: a batch takes each job's priority and run
// time, on a store that commits a batch at once and on one that does not;
// jobs of one priority and run time start in the batch's order.
func TestEnqueueManySchedules(t *testing.T) {
	t.Parallel()
	for _, sc := range []storeCase{stores[0], {"sqlite", teststores.SQLite}} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			q := newQueue(t, sc.new(t), clk)
			var batch []jobqueue.NewJob
			for _, j := range []struct {
				id    string
				p     int
				runAt time.Duration
			}{{"d3", 5, time.Minute}, {"d1", 5, time.Minute}, {"now", 5, 0}, {"hi", 9, time.Minute}, {"d2", 5, time.Minute}} {
				n := spec(j.id, "agent-a")
				n.Priority = j.p
				if j.runAt > 0 {
					n.RunAt = t0.Add(j.runAt)
				}
				batch = append(batch, n)
			}
			jobs, err := q.EnqueueMany(ctx, lifecycle.ActorGateway, batch)
			if err != nil {
				t.Fatal(err)
			}
			if jobs[3].Priority != 9 || jobs[2].Priority != 0 || jobs[0].ScheduledAt == nil || jobs[2].ScheduledAt != nil {
				t.Fatalf("batch answered %+v", jobs)
			}
			clk.Advance(time.Microsecond) // a batch's jobs are ready a nanosecond apart
			if c := claim(t, q, "w"); c == nil || c.Job().JobID != "now" {
				t.Fatalf("claimed %v, want now", c)
			} else if _, err := c.Run(ctx, okHandlers()); err != nil {
				t.Fatal(err)
			}
			if c := claim(t, q, "w"); c != nil {
				t.Fatalf("claimed %s before its time", c.Job().JobID)
			}
			clk.Advance(time.Minute)
			if got := runInOrder(t, q, clk, 4); !slices.Equal(got, []string{"hi", "d3", "d1", "d2"}) {
				t.Fatalf("started %v, want hi, then d3, d1, d2 in the batch's order", got)
			}
		})
	}
}
