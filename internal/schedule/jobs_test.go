package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Periodic jobs: schedules that enqueue a job at each slot, exactly once
// per slot across the processes sharing a store, on a store that settles
// too (docs/stores.md#the-fault-model).

const (
	digestType lifecycle.JobType = "DIGEST"
	doomedType lifecycle.JobType = "DOOMED" // its handler always fails for good
	settle                       = 10 * time.Second
)

// jobTypes are the job types of every test Queue.
var jobTypes = map[lifecycle.JobType]jobqueue.TypeConfig{
	digestType: {Handler: jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: json.RawMessage(`{"sent":true}`)}, nil
	})},
	doomedType: {Handler: jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("the mail server refuses it"))
	})},
}

func digestEvery(id string, every time.Duration) schedule.Schedule {
	return schedule.Schedule{ID: id, Every: every, Job: &lifecycle.ScheduleJob{JobType: digestType, Payload: json.RawMessage(`{"to":"ops"}`)}}
}

// jobProc is one process: a Queue and a Scheduler that enqueues on it.
type jobProc struct {
	queue *jobqueue.Queue
	sched *schedule.Scheduler
	stop  func()
}

// startJobs starts one process's Scheduler of periodic jobs on the rig's
// store and clock.
func (g *rig) startJobs(schedules ...schedule.Schedule) *jobProc {
	g.t.Helper()
	log := quiet
	if g.log != nil {
		log = g.log
	}
	q, err := jobqueue.New(jobqueue.Config{Store: g.store, Clock: g.clock, Logger: log, Types: jobTypes})
	if err != nil {
		g.t.Fatal(err)
	}
	s, err := schedule.New(schedule.Config{Queue: q, Store: g.store, Clock: g.clock, Logger: log, Schedules: schedules})
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	var once sync.Once
	p := &jobProc{queue: q, sched: s, stop: func() { once.Do(func() { cancel(); <-done }) }}
	g.t.Cleanup(p.stop)
	return p
}

// jobs lists the ids of the jobs that exist, failing on one that is not a
// schedule's.
func jobs(t *testing.T, q *jobqueue.Queue) []string {
	t.Helper()
	var ids []string
	for j, err := range q.List(context.Background(), lifecycle.ActorOrchestration) {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(j.JobID, "scheduler:") || j.JobType != digestType && j.JobType != doomedType {
			t.Errorf("job %s of type %s is no schedule's", j.JobID, j.JobType)
		}
		ids = append(ids, j.JobID)
	}
	sort.Strings(ids)
	return ids
}

// runJobs runs every ready job to its end (COMPLETE or DEAD).
func runJobs(t *testing.T, q *jobqueue.Queue) {
	t.Helper()
	for range 100 {
		c, err := q.Claim(context.Background(), "w")
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			return
		}
		if _, err := c.Run(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// settlingStore is a fault store that settles in settle on the rig's
// clock, its faults limited to the job records.
func settlingStore(clk *clock.Fake) *faultstore.Store {
	fs := faultstore.New(memstore.New())
	fs.SetSettle(settle, clk.Now)
	fs.Match(func(k string) bool { return strings.HasPrefix(k, "jobs/") })
	return fs
}

// TestPeriodicJobOncePerSlot: three processes enqueue one schedule's jobs
// over four hours of 5-minute slots, one killed halfway: every slot
// enqueued exactly one job, none skipped, and no lost race was logged as a
// failure. On a store that settles, a false not-found and a create
// accepted over an existing job are armed at every slot, and no job is
// created twice.
func TestPeriodicJobOncePerSlot(t *testing.T) {
	t.Parallel()
	for _, settles := range []bool{false, true} {
		t.Run(fmt.Sprintf("settles=%v", settles), func(t *testing.T) {
			t.Parallel()
			g := newRig(t, nil)
			var fs *faultstore.Store
			if settles {
				fs = settlingStore(g.clock)
				g.store = storage.New(fs)
			}
			logs := &testlog.Buffer{}
			g.log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			sc := schedule.Schedule{ID: "digest", Cron: "*/5 * * * *", Job: &lifecycle.ScheduleJob{JobType: digestType}}
			var procs []*jobProc
			for range 3 {
				procs = append(procs, g.startJobs(sc))
			}
			live := 3
			g.settle(g.clock, live)
			if settles {
				// A new schedule's state is created once read missing
				// Settle apart, looked at every RetryInterval.
				for range 10 {
					g.clock.Advance(time.Second)
					g.settle(g.clock, live)
				}
			}
			for i := range 48 {
				if i == 24 {
					procs[1].stop()
					live--
				}
				if fs != nil {
					fs.FalseNotFound(1)
					fs.AcceptCreateOver(1)
				}
				g.clock.Advance(5 * time.Minute)
				g.settle(g.clock, live)
			}
			if fs != nil {
				fs.Calm() // the faults left are not the listing's
			}
			got := jobs(t, procs[0].queue)
			want := slotKeys("digest", day0, g.clock.Now())
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%d jobs, want %d, one per slot: %s\n%s", len(got), len(want), diff(want, got), logs)
			}
			if n := logs.Count("schedule_failed"); n != 0 {
				t.Errorf("%d schedule_failed logged for lost races:\n%s", n, logs)
			}
			if fs != nil {
				// Faults land only on a look at a slot's existing job (a
				// process that lost the claim): how many is the race's.
				// TestPeriodicJobClaimantDies provokes them for sure.
				t.Logf("%d faults injected", fs.Faults().Total())
				if fs.Faults().DoubleCreates != 0 {
					t.Fatalf("%d jobs created twice", fs.Faults().DoubleCreates)
				}
			}
			infos, err := procs[2].sched.List(context.Background())
			if err != nil || len(infos) != 1 || infos[0].LastJobID != want[len(want)-1] || infos[0].LastRunID != "" {
				t.Fatalf("List = %+v, %v; want the last slot's job", infos, err)
			}
		})
	}
}

// dieAfter is a process's store that fails everything once a write that
// matches has landed: the process died right after it.
type dieAfter struct {
	driver.Store
	match func(key string, c storage.Condition) bool
	mu    sync.Mutex
	dead  bool
}

func (d *dieAfter) died() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.dead }

func (d *dieAfter) Get(ctx context.Context, k string) ([]byte, storage.Version, error) {
	if d.died() {
		return nil, "", errors.New("process dead")
	}
	return d.Store.Get(ctx, k)
}

func (d *dieAfter) Put(ctx context.Context, k string, v []byte, c storage.Condition) (storage.Version, error) {
	if d.died() {
		return "", errors.New("process dead")
	}
	ver, err := d.Store.Put(ctx, k, v, c)
	if err == nil && d.match(k, c) {
		d.mu.Lock()
		d.dead = true
		d.mu.Unlock()
	}
	return ver, err
}

func (d *dieAfter) Delete(ctx context.Context, k string, c storage.Condition) error {
	if d.died() {
		return errors.New("process dead")
	}
	return d.Store.Delete(ctx, k, c)
}

// memOf is the driver under a fault store, or the store's own.
func memOf(s *storage.Store) driver.Store {
	if fs, ok := s.Unwrap().(*faultstore.Store); ok {
		return fs.Store
	}
	return s.Unwrap()
}

// afterClaim: the write that claims a slot (the schedule's state, over a
// version); afterJob: the slot job's create.
func afterClaim(k string, c storage.Condition) bool {
	return strings.HasPrefix(k, "schedules/") && c.Kind() == driver.MatchVersion
}

func afterJob(k string, c storage.Condition) bool {
	return strings.HasPrefix(k, "jobs/") && c.Kind() == driver.CreateOnly
}

// TestPeriodicJobClaimantDies: the process that claimed a slot dies before
// enqueuing its job, or after (the job then runs to its end before anyone
// looks again). On a store that settles at once the survivors enqueue the
// slot's job at their first look; on one that settles they do once the
// job has read missing Settle apart and the claim is Settle old, never
// sooner; and a job that exists is never enqueued again, whatever the
// store answers within its bound: not a COMPLETE job, not a DEAD one.
func TestPeriodicJobClaimantDies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		settles bool
		dies    func(string, storage.Condition) bool
		typ     lifecycle.JobType
		end     lifecycle.JobState // the job's end, run before the survivors look
	}{
		{"before the job", false, afterClaim, digestType, ""},
		{"before the job, settling", true, afterClaim, digestType, ""},
		{"after the job", false, afterJob, digestType, lifecycle.JobComplete},
		{"after the job, settling, COMPLETE", true, afterJob, digestType, lifecycle.JobComplete},
		{"after the job, settling, DEAD", true, afterJob, doomedType, lifecycle.JobDead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, nil)
			var fs *faultstore.Store
			if tt.settles {
				fs = settlingStore(g.clock)
				g.store = storage.New(fs)
			}
			base := g.store
			// truth reads the store under the faults.
			truth, err := jobqueue.New(jobqueue.Config{Store: storage.New(memOf(base)), Clock: g.clock, Logger: quiet, Types: jobTypes})
			if err != nil {
				t.Fatal(err)
			}
			sc := schedule.Schedule{ID: "fragile", Every: 10 * time.Second, Job: &lifecycle.ScheduleJob{JobType: tt.typ}}
			dying := &dieAfter{Store: base.Unwrap(), match: tt.dies}
			g.store = storage.New(dying)
			d := g.startJobs(sc)
			g.store = base
			g.settle(g.clock, 1)
			g.clock.Advance(10 * time.Second) // d claims the slot and dies
			g.settle(g.clock, 1)
			d.stop()
			if !dying.died() {
				t.Fatal("the dying process never claimed a slot")
			}
			slot := g.clock.Now().Truncate(10 * time.Second)
			id := schedule.Key("fragile", slot)
			ctx := context.Background()
			var created time.Time
			if tt.end != "" {
				// The job runs to its end before any survivor looks.
				runner, err := jobqueue.New(jobqueue.Config{Store: base, Clock: g.clock, Logger: quiet, Types: jobTypes})
				if err != nil {
					t.Fatal(err)
				}
				runJobs(t, runner)
				j, err := runner.Job(ctx, id)
				if err != nil || j.Status != tt.end {
					t.Fatalf("the dead process's job: %+v, %v; want it %s", j, err, tt.end)
				}
				created = j.CreatedAt
			}
			if fs != nil {
				// The store's worst within its bound, from the survivors'
				// first look: every read of the job missing, every create
				// over it accepted.
				fs.Disturb()
			}
			a, b := g.startJobs(sc), g.startJobs(sc)
			g.settle(g.clock, 2)
			if tt.end == "" {
				if got := jobs(t, truth); tt.settles && len(got) != 0 {
					t.Fatalf("jobs %v at the survivors' first look: on a store that settles, not before Settle", got)
				} else if !tt.settles && (len(got) != 1 || got[0] != id) {
					t.Fatalf("jobs %v at the survivors' first look, want the claimed slot's at once", got)
				}
			}
			// Within the slot's period the store settles (the window ends
			// Settle after it opened) and the claim lapses.
			for range 10 {
				g.clock.Advance(time.Second)
				g.settle(g.clock, 2)
			}
			injected := int64(0)
			if fs != nil {
				injected = fs.Faults().Total()
				fs.Calm()
			}
			if got := jobs(t, a.queue); len(got) < 1 || got[0] != id {
				t.Fatalf("jobs %v, want the claimed slot's first", got)
			}
			j, err := a.queue.Job(ctx, id)
			switch {
			case err != nil:
				t.Fatalf("the slot's job: %v", err)
			case tt.end != "" && (j.Status != tt.end || !j.CreatedAt.Equal(created)):
				t.Fatalf("the slot's job is %s, created %s; want it left %s, created %s", j.Status, j.CreatedAt, tt.end, created)
			case fs != nil && fs.Faults().DoubleCreates != 0:
				t.Fatalf("%d jobs created twice", fs.Faults().DoubleCreates)
			case fs != nil && tt.end != "" && injected == 0:
				t.Fatal("the survivors' looks provoked no fault")
			}
			for q, err := range records.ListQuarantine(ctx, g.store) {
				t.Fatalf("quarantined: %+v, %v", q, err)
			}
			for _, p := range []*jobProc{a, b} {
				infos, err := p.sched.List(ctx)
				if err != nil || infos[0].LastSlot.Before(slot) {
					t.Fatalf("List = %+v, %v: the claimed slot is not dealt with", infos, err)
				}
			}
			if tt.end != "" && fs != nil {
				// The checker fails: the same faults, given a plain enqueue
				// of the slot's job, create it again over the ended one.
				fs.Disturb()
				_, err := a.queue.InsertJob(ctx, jobqueue.NewJob{JobID: id, JobType: tt.typ})
				if err != nil || fs.Faults().DoubleCreates != 1 {
					t.Fatalf("a plain enqueue in the disturbance: %v, %d double creates; the faults are too weak to test", err, fs.Faults().DoubleCreates)
				}
			}
		})
	}
}

// TestPeriodicJobNoSlotInsideTheCatchUpBoundIsSkipped: every process is
// down for as many slots as the catch-up bound, one slot claimed by a
// process killed before its job; the first process back enqueues each,
// once. Down longer, it enqueues the claimed slot's job and the bound's
// newest, and skips only the slots past the bound.
func TestPeriodicJobNoSlotInsideTheCatchUpBoundIsSkipped(t *testing.T) {
	t.Parallel()
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("past_the_bound=%v", late), func(t *testing.T) {
			t.Parallel()
			g := newRig(t, nil)
			base := g.store
			sc := digestEvery("bounded", 10*time.Second)
			sc.CatchUp = 6
			dying := &dieAfter{Store: base.Unwrap(), match: afterClaim}
			g.store = storage.New(dying)
			d := g.startJobs(sc)
			g.store = base
			g.settle(g.clock, 1)
			g.clock.Advance(10 * time.Second) // claims the first slot, dies
			g.settle(g.clock, 1)
			d.stop()
			claimed := g.clock.Now().Truncate(10 * time.Second)
			first := claimed
			down := 50 * time.Second
			if late {
				down += 2 * time.Minute
			}
			g.clock.Advance(down)
			if late {
				first = g.clock.Now().Truncate(10 * time.Second).Add(-60 * time.Second)
			}
			p := g.startJobs(sc)
			g.settle(g.clock, 1)
			var want []string
			if late {
				want = append(want, schedule.Key("bounded", claimed))
			}
			for s := first; !s.After(g.clock.Now()); s = s.Add(10 * time.Second) {
				want = append(want, schedule.Key("bounded", s))
			}
			sort.Strings(want)
			if got := jobs(t, p.queue); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("jobs %v, want %v: %s", got, want, diff(want, got))
			}
		})
	}
}

// TestPeriodicJobStateReadMissing: on a store that settles, a schedule's
// state read missing is not created afresh over the real one (which would
// drop its pause) until it has read missing Settle apart.
func TestPeriodicJobStateReadMissing(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	fs := faultstore.New(memstore.New())
	fs.SetSettle(settle, g.clock.Now)
	fs.Match(func(k string) bool { return strings.HasPrefix(k, "schedules/") })
	g.store = storage.New(fs)
	sc := digestEvery("paused", time.Minute)
	p := g.startJobs(sc)
	g.settle(g.clock, 1)
	for range 10 { // a new schedule's state is created once read missing Settle apart
		g.clock.Advance(time.Second)
		g.settle(g.clock, 1)
	}
	ctx := context.Background()
	if _, err := p.sched.Pause(ctx, "paused", "ops"); err != nil {
		t.Fatal(err)
	}
	g.settle(g.clock, 1)
	fs.FalseNotFound(1)
	fs.AcceptCreateOver(1)
	for range 3 {
		g.clock.Advance(time.Minute)
		g.settle(g.clock, 1)
	}
	if fs.Faults().FalseNotFounds == 0 {
		t.Fatal("no false not-found was provoked")
	}
	if got := jobs(t, p.queue); len(got) != 0 || fs.Faults().DoubleCreates != 0 {
		t.Fatalf("jobs %v of a paused schedule, %d states created over the real one", got, fs.Faults().DoubleCreates)
	}
	infos, err := p.sched.List(ctx)
	if err != nil || !infos[0].Paused || infos[0].PausedBy != "ops" {
		t.Fatalf("List = %+v, %v: the pause was lost", infos, err)
	}
	key, _ := layout.ScheduleKey("paused")
	if _, _, err := g.store.Get(ctx, key); err != nil {
		t.Fatal(err)
	}
}

// TestPeriodicJobInvalidIsGivenUp: a slot whose job the queue refuses (a
// lane no job may take) is given up, logged, and the schedule goes on.
func TestPeriodicJobInvalidIsGivenUp(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	logs := &testlog.Buffer{}
	g.log = slog.New(slog.NewJSONHandler(logs, nil))
	sc := schedule.Schedule{ID: "refused", Every: time.Minute, Job: &lifecycle.ScheduleJob{JobType: "UNKNOWN"}}
	p := g.startJobs(sc)
	g.settle(g.clock, 1)
	for range 2 {
		g.clock.Advance(time.Minute)
		g.settle(g.clock, 1)
	}
	if n := logs.Count("schedule_slot_failed"); n != 2 {
		t.Fatalf("schedule_slot_failed logged %d times, want once a slot:\n%s", n, logs)
	}
	if infos, err := p.sched.List(context.Background()); err != nil || !infos[0].LastSlot.Equal(g.clock.Now().Truncate(time.Minute)) {
		t.Fatalf("List = %+v, %v: the schedule did not go on", infos, err)
	}
}
