package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

var env teststores.Env

func TestMain(m *testing.M) { goleak.VerifyTestMain(env.Wrap(m)) }

// day0 is 30 s past midnight: the first slot of */5 is 00:05.
var day0 = time.Date(2026, 3, 1, 0, 0, 30, 0, time.UTC)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const agent = "reporter"

// rig is processes sharing one store, each with a Runner (only its Submit
// is used: the runs are not executed) and a Scheduler.
type rig struct {
	t     *testing.T
	store *storage.Store
	clock *clock.Fake
	procs []*proc
	// log, when set, receives the next started processes' logs.
	log *slog.Logger
}

type proc struct {
	runner *run.Runner
	sched  *schedule.Scheduler
	stop   func()
}

func newRig(t *testing.T, store *storage.Store) *rig {
	if store == nil {
		store = memstore.New()
	}
	return &rig{t: t, store: store, clock: clock.NewFake(day0)}
}

// start starts one process's Scheduler with the schedules, on clk (the
// rig's by default).
func (g *rig) start(clk *clock.Fake, schedules ...schedule.Schedule) *proc {
	g.t.Helper()
	if clk == nil {
		clk = g.clock
	}
	log := quiet
	if g.log != nil {
		log = g.log
	}
	r, err := run.NewRunner(run.Config{Store: g.store, Clock: clk, Logger: log},
		run.Agent{Slug: agent, Steps: []run.Step{{Name: "report", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{}, nil
		}}}})
	if err != nil {
		g.t.Fatal(err)
	}
	s, err := schedule.New(schedule.Config{Runner: r, Store: g.store, Clock: clk, Logger: log, Schedules: schedules})
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	var once sync.Once
	p := &proc{runner: r, sched: s, stop: func() { once.Do(func() { cancel(); <-done }) }}
	g.t.Cleanup(p.stop)
	g.procs = append(g.procs, p)
	return p
}

// settle waits until n schedulers wait on the clock again.
func (g *rig) settle(clk *clock.Fake, n int) {
	g.t.Helper()
	select {
	case <-clk.WaitForTimers(n):
	case <-time.After(30 * time.Second):
		g.t.Fatalf("%d schedulers did not settle (timers pending: %d)", n, clk.Pending())
	}
}

// runs lists the slots whose runs exist, from the runs' idempotency keys,
// and fails on a slot with two runs or a run that is not the scheduler's.
func (g *rig) runs(r *run.Runner) []string {
	g.t.Helper()
	sts, err := r.Runs(context.Background(), agent)
	if err != nil {
		g.t.Fatal(err)
	}
	seen := map[string]string{}
	var slots []string
	for _, st := range sts {
		if st.Trigger != "cron" || !strings.HasPrefix(st.IdempotencyKey, "scheduler:") {
			g.t.Errorf("run %s: trigger %q key %q", st.RunID, st.Trigger, st.IdempotencyKey)
		}
		if prev, dup := seen[st.IdempotencyKey]; dup {
			g.t.Errorf("slot %s has two runs: %s and %s", st.IdempotencyKey, prev, st.RunID)
		}
		seen[st.IdempotencyKey] = st.RunID
		slots = append(slots, st.IdempotencyKey)
	}
	sort.Strings(slots)
	return slots
}

func every5(id string) schedule.Schedule {
	return schedule.Schedule{ID: id, Agent: agent, Cron: "*/5 * * * *"}
}

// slotKeys are the keys of the */5 slots in (from, to].
func slotKeys(id string, from, to time.Time) []string {
	var out []string
	for s := from.Truncate(5 * time.Minute).Add(5 * time.Minute); !s.After(to); s = s.Add(5 * time.Minute) {
		out = append(out, schedule.Key(id, s))
	}
	return out
}

// TestExactlyOncePerSlot: three processes' schedulers share a store (a
// memstore, a MinIO bucket) over a simulated day of */5 * * * *; one is
// killed mid-day. Every slot started exactly one run: 288, and no lost
// race was logged as a failure.
func TestExactlyOncePerSlot(t *testing.T) {
	t.Parallel()
	env.Each(t, exactlyOncePerSlot)
}

func exactlyOncePerSlot(t *testing.T, store *storage.Store) {
	g := newRig(t, store)
	logs := &testlog.Buffer{}
	g.log = slog.New(slog.NewJSONHandler(logs, nil))
	for range 3 {
		g.start(nil, every5("digest"))
	}
	live := 3
	g.settle(g.clock, live)
	for i := range 288 {
		if i == 144 {
			g.procs[1].stop() // killed at noon
			live--
		}
		g.clock.Advance(5 * time.Minute)
		g.settle(g.clock, live)
	}
	got := g.runs(g.procs[0].runner)
	want := slotKeys("digest", day0, day0.Add(24*time.Hour))
	if len(got) != 288 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%d runs, want 288, one per slot; missing or extra: %v", len(got), diff(want, got))
	}
	// Two of three processes lose each slot's race: that is no failure.
	if n := logs.Count("schedule_failed"); n != 0 {
		t.Errorf("%d schedule_failed logged for lost races", n)
	}
}

// TestClockJumps: the clock jumps forward 30 min (the slots in between
// are caught up, none skipped) and a process whose clock is 20 min behind
// fires nothing twice.
func TestClockJumps(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	g.start(nil, every5("jumpy"))
	g.settle(g.clock, 1)
	for range 3 {
		g.clock.Advance(5 * time.Minute)
		g.settle(g.clock, 1)
	}
	g.clock.Advance(30 * time.Minute) // forward jump
	g.settle(g.clock, 1)
	// A second process whose clock is 20 min behind the first's.
	behind := clock.NewFake(g.clock.Now().Add(-20 * time.Minute))
	g.start(behind, every5("jumpy"))
	g.settle(behind, 1)
	for range 6 {
		behind.Advance(5 * time.Minute)
		g.settle(behind, 1)
	}
	// Its clock ends 10 min past the first's: the slots past 00:45 are new.
	got := g.runs(g.procs[0].runner)
	want := slotKeys("jumpy", day0, behind.Now())
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runs %d, want %d (every slot once): %v", len(got), len(want), diff(want, got))
	}
}

// TestMissedPolicies: after a 2-hour outage (no process up), each policy
// does what its doc says.
func TestMissedPolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		missed  string
		catchUp int
		// want: the slots fired at the restart, as minutes past 03:00
		// (negative: before it).
		want []int
	}{
		{schedule.MissedCatchUp, 5, []int{-20, -15, -10, -5, 0}},
		{schedule.MissedLatest, 0, []int{0}},
		{schedule.MissedSkip, 0, nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.missed), func(t *testing.T) {
			t.Parallel()
			g := newRig(t, nil)
			sc := schedule.Schedule{ID: "outage", Agent: agent, Cron: "*/5 * * * *", Missed: tt.missed, CatchUp: tt.catchUp}
			p := g.start(nil, sc)
			g.settle(g.clock, 1)
			for range 12 { // up to 01:00
				g.clock.Advance(5 * time.Minute)
				g.settle(g.clock, 1)
			}
			before := len(g.runs(p.runner))
			p.stop()
			// Down from 01:00:30 to 03:02:30: 03:00 is 2.5 min late, past
			// the 1 min grace, so every slot of the outage is missed.
			g.clock.Advance(2*time.Hour + 2*time.Minute)
			p = g.start(nil, sc)
			g.settle(g.clock, 1)
			var got []int
			three := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
			keys := g.runs(p.runner)
			for _, k := range keys[before:] {
				for m := -120; m <= 5; m += 5 {
					if k == schedule.Key("outage", three.Add(time.Duration(m)*time.Minute)) {
						got = append(got, m)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("fired at the restart %v, want %v", got, tt.want)
			}
			// Then on with the next slot, on time.
			g.clock.Advance(3 * time.Minute)
			g.settle(g.clock, 1)
			if keys := g.runs(p.runner); keys[len(keys)-1] != schedule.Key("outage", three.Add(5*time.Minute)) {
				t.Fatalf("after the restart the next slot did not fire: last %s", keys[len(keys)-1])
			}
		})
	}
}

// TestPauseResume: a paused schedule fires nothing, in any process; its
// slots while paused are skipped, not fired at the resume.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	a := g.start(nil, every5("pausable"))
	b := g.start(nil, every5("pausable"))
	g.settle(g.clock, 2)
	ctx := context.Background()
	if _, err := a.sched.Pause(ctx, "pausable", "admin"); err != nil {
		t.Fatal(err)
	}
	g.settle(g.clock, 2)
	for range 4 {
		g.clock.Advance(5 * time.Minute)
		g.settle(g.clock, 2)
	}
	if n := len(g.runs(a.runner)); n != 0 {
		t.Fatalf("%d runs while paused", n)
	}
	infos, err := b.sched.List(ctx)
	if err != nil || len(infos) != 1 || !infos[0].Paused || infos[0].PausedBy != "admin" {
		t.Fatalf("List in the other process: %+v, %v", infos, err)
	}
	if _, err := b.sched.Resume(ctx, "pausable"); err != nil {
		t.Fatal(err)
	}
	g.settle(g.clock, 2)
	if n := len(g.runs(a.runner)); n != 0 {
		t.Fatalf("%d runs at the resume: the paused slots must not fire", n)
	}
	g.clock.Advance(5 * time.Minute)
	g.settle(g.clock, 2)
	want := []string{schedule.Key("pausable", day0.Truncate(time.Minute).Add(25*time.Minute))}
	if got := g.runs(a.runner); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the resume %v, want %v", got, want)
	}
	if _, err := a.sched.Pause(ctx, "nope", "admin"); !errors.Is(err, schedule.ErrUnknownSchedule) {
		t.Fatalf("Pause of an unknown schedule: %v", err)
	}
}

// TestJitter: every process delays a slot by the same amount, and the run's
// key stays the slot's.
func TestJitter(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	sc := schedule.Schedule{ID: "jittery", Agent: agent, Every: time.Hour, Jitter: 10 * time.Minute}
	a := g.start(nil, sc)
	g.start(nil, sc)
	g.settle(g.clock, 2)
	g.clock.Advance(59*time.Minute + 30*time.Second) // 01:00:00, the slot
	g.settle(g.clock, 2)
	early := len(g.runs(a.runner))
	g.clock.Advance(10 * time.Minute)
	g.settle(g.clock, 2)
	got := g.runs(a.runner)
	if len(got) != 1 || got[0] != schedule.Key("jittery", day0.Truncate(time.Hour).Add(time.Hour)) {
		t.Fatalf("runs %v", got)
	}
	if early != 0 {
		// The slot's jitter is a fixed function of the id and the slot, and
		// not 0 for these: at the slot itself nothing may fire yet.
		t.Fatalf("%d runs at the slot itself, before its jitter", early)
	}
}

// TestCrashBetweenClaimAndRun: a process dies after claiming a slot (its
// idempotency record) and before creating the run; the next process to
// look creates the slot's run at once, under the claimed id, and fires the
// slots after it on time. Losing the slot's race to the dead process is
// no failure: nothing is logged as one, and nothing backs off.
func TestCrashBetweenClaimAndRun(t *testing.T) {
	t.Parallel()
	base := memstore.New()
	dying := &dieAfterClaim{Store: base}
	g := newRig(t, base)
	sc := schedule.Schedule{ID: "fragile", Agent: agent, Every: 10 * time.Second}
	// The dying process: its store stops answering right after the claim.
	g.store = storage.New(dying)
	d := g.start(nil, sc)
	g.store = base
	g.settle(g.clock, 1)
	g.clock.Advance(10 * time.Second) // d claims the slot and dies
	g.settle(g.clock, 1)
	d.stop()
	if !dying.died() {
		t.Fatal("the dying process never claimed a slot")
	}
	claimed := g.clock.Now().Truncate(10 * time.Second)
	logs := &testlog.Buffer{}
	g.log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, b := g.start(nil, sc), g.start(nil, sc)
	g.settle(g.clock, 2)
	// At once, not when the claim's lease lapses: both survivors find the
	// slot pending; its one run exists.
	rec, err := idemrecord.Read(context.Background(), g.store, g.clock.Now(), schedule.Key("fragile", claimed))
	if err != nil {
		t.Fatal(err)
	}
	if got := g.runs(b.runner); len(got) != 1 || got[0] != schedule.Key("fragile", claimed) {
		t.Fatalf("runs %v right after the crash, want the claimed slot's", got)
	}
	if _, err := a.runner.Status(context.Background(), rec.RunID); err != nil {
		t.Fatalf("the claimed run %s: %v", rec.RunID, err)
	}
	for range 3 {
		g.clock.Advance(10 * time.Second)
		g.settle(g.clock, 2)
	}
	got := g.runs(a.runner)
	var want []string
	for s := claimed; !s.After(g.clock.Now()); s = s.Add(10 * time.Second) {
		want = append(want, schedule.Key("fragile", s))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runs %v, want one per slot %v", got, want)
	}
	if n := logs.Count("schedule_failed"); n != 0 {
		t.Errorf("%d schedule_failed logged for a lost race:\n%s", n, logs)
	}
}

// TestFailedFiringIsRetriedSoon: a firing the store fails is tried again
// after RetryInterval, not after PollInterval: the slot's run is late by
// a second, not by a poll.
func TestFailedFiringIsRetriedSoon(t *testing.T) {
	t.Parallel()
	base := memstore.New()
	flaky := &failSome{Store: base, left: 1}
	g := newRig(t, storage.New(flaky))
	sc := schedule.Schedule{ID: "flaky", Agent: agent, Every: time.Minute}
	p := g.start(nil, sc)
	g.settle(g.clock, 1)
	g.clock.Advance(30 * time.Second) // 00:01:00: the submit fails once
	g.settle(g.clock, 1)
	if n := len(g.runs(p.runner)); n != 0 || flaky.remaining() != 0 {
		t.Fatalf("%d runs; failures left %d", n, flaky.remaining())
	}
	g.clock.Advance(time.Second)
	g.settle(g.clock, 1)
	if got := g.runs(p.runner); len(got) != 1 {
		t.Fatalf("runs %v a second after the failure, want the slot's", got)
	}
}

// TestSlotOutOfAttemptsIsGivenUp: a slot whose run could not be created
// in all its key's attempts is given up, logged, and the schedule goes on
// with its next slot (not stuck until the key's record expires).
func TestSlotOutOfAttemptsIsGivenUp(t *testing.T) {
	t.Parallel()
	flaky := &failSome{Store: memstore.New(), left: 3, match: func(k string, _ storage.Condition) bool { return strings.HasSuffix(k, "/status.json") }}
	g := newRig(t, storage.New(flaky))
	logs := &testlog.Buffer{}
	g.log = slog.New(slog.NewJSONHandler(logs, nil))
	sc := schedule.Schedule{ID: "doomed", Agent: agent, Every: time.Minute}
	p := g.start(nil, sc)
	g.settle(g.clock, 1)
	g.clock.Advance(30 * time.Second) // 00:01:00: its run fails to be written
	g.settle(g.clock, 1)
	for range 3 { // retried every second, out of attempts at the third
		g.clock.Advance(time.Second)
		g.settle(g.clock, 1)
	}
	if n := logs.Count("schedule_slot_failed"); n != 1 || flaky.remaining() != 0 {
		t.Fatalf("schedule_slot_failed logged %d times (failures left %d):\n%s", n, flaky.remaining(), logs)
	}
	g.clock.Advance(time.Minute)
	g.settle(g.clock, 1)
	if got := g.runs(p.runner); len(got) != 1 || got[0] != schedule.Key("doomed", day0.Truncate(time.Minute).Add(2*time.Minute)) {
		t.Fatalf("runs %v, want the next slot's", got)
	}
}

// failSome fails the next left writes that match (default: create-only
// writes of idempotency records).
type failSome struct {
	driver.Store
	mu    sync.Mutex
	left  int
	match func(key string, c storage.Condition) bool
}

func (f *failSome) remaining() int { f.mu.Lock(); defer f.mu.Unlock(); return f.left }

func (f *failSome) Put(ctx context.Context, k string, v []byte, c storage.Condition) (storage.Version, error) {
	f.mu.Lock()
	match := f.match
	if match == nil {
		match = func(k string, c storage.Condition) bool {
			return strings.HasPrefix(k, "idempotency/") && c.Kind() == driver.CreateOnly
		}
	}
	fail := f.left > 0 && match(k, c)
	if fail {
		f.left--
	}
	f.mu.Unlock()
	if fail {
		return "", errors.New("injected: disk full")
	}
	return f.Store.Put(ctx, k, v, c)
}

// TestNoSlotInsideTheCatchUpBoundIsSkipped: every process is down for as
// many slots as the catch-up bound, one of them left pending by a process
// killed mid-firing; the first process back fires every one of them, once.
// Down longer, it fires the pending slot and the bound's newest (and the
// one on time), and skips only the slots past the bound.
func TestNoSlotInsideTheCatchUpBoundIsSkipped(t *testing.T) {
	t.Parallel()
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("past_the_bound=%v", late), func(t *testing.T) {
			t.Parallel()
			base := memstore.New()
			dying := &dieAfterClaim{Store: base}
			g := newRig(t, base)
			sc := schedule.Schedule{ID: "bounded", Agent: agent, Every: 10 * time.Second, CatchUp: 6}
			g.store = storage.New(dying)
			d := g.start(nil, sc)
			g.store = base
			g.settle(g.clock, 1)
			g.clock.Advance(10 * time.Second) // claims the first slot, dies
			g.settle(g.clock, 1)
			d.stop()
			first := g.clock.Now().Truncate(10 * time.Second)
			// Down until CatchUp slots are due (the claimed one and 5 more),
			// or 2 min more.
			down := 50 * time.Second
			if late {
				down += 2 * time.Minute
			}
			g.clock.Advance(down)
			if late {
				// Those 2 min hold 12 more slots: past the bound. The claimed
				// slot (pending), the newest 6 and the one on time are fired.
				first = g.clock.Now().Truncate(10 * time.Second).Add(-60 * time.Second)
			}
			p := g.start(nil, sc)
			g.settle(g.clock, 1)
			got := g.runs(p.runner)
			var want []string
			if late {
				want = append(want, schedule.Key("bounded", day0.Truncate(10*time.Second).Add(10*time.Second)))
			}
			for s := first; !s.After(g.clock.Now()); s = s.Add(10 * time.Second) {
				want = append(want, schedule.Key("bounded", s))
			}
			sort.Strings(want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("runs %v, want %v: %s", got, want, diff(want, got))
			}
		})
	}
}

// dieAfterClaim is a process's store that fails everything once a
// scheduler's idempotency record has been created.
type dieAfterClaim struct {
	driver.Store
	mu   sync.Mutex
	dead bool
}

func (d *dieAfterClaim) died() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.dead }

func (d *dieAfterClaim) check() error {
	if d.died() {
		return errors.New("process dead")
	}
	return nil
}

func (d *dieAfterClaim) Get(ctx context.Context, k string) ([]byte, storage.Version, error) {
	if err := d.check(); err != nil {
		return nil, "", err
	}
	return d.Store.Get(ctx, k)
}

func (d *dieAfterClaim) Put(ctx context.Context, k string, v []byte, c storage.Condition) (storage.Version, error) {
	if err := d.check(); err != nil {
		return "", err
	}
	ver, err := d.Store.Put(ctx, k, v, c)
	if err == nil && strings.HasPrefix(k, "idempotency/") && c.Kind() == driver.CreateOnly {
		d.mu.Lock()
		d.dead = true
		d.mu.Unlock()
	}
	return ver, err
}

func (d *dieAfterClaim) Delete(ctx context.Context, k string, c storage.Condition) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.Store.Delete(ctx, k, c)
}

// TestInvalidSchedules: each bad schedule is refused by New with a reason.
func TestInvalidSchedules(t *testing.T) {
	t.Parallel()
	r, err := run.NewRunner(run.Config{Store: memstore.New(), Logger: quiet},
		run.Agent{Slug: agent, Steps: []run.Step{{Name: "x", Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		s    []schedule.Schedule
		want string
	}{
		{"bad cron", []schedule.Schedule{{ID: "a", Agent: agent, Cron: "61 * * * *"}}, "cron"},
		{"both", []schedule.Schedule{{ID: "a", Agent: agent, Cron: "@hourly", Every: time.Hour}}, "exactly one"},
		{"neither", []schedule.Schedule{{ID: "a", Agent: agent}}, "exactly one"},
		{"sub-second", []schedule.Schedule{{ID: "a", Agent: agent, Every: 1500 * time.Millisecond}}, "whole seconds"},
		{"zone", []schedule.Schedule{{ID: "a", Agent: agent, Cron: "@daily", TimeZone: "Mars/Olympus"}}, "time_zone"},
		{"agent", []schedule.Schedule{{ID: "a", Agent: "ghost", Cron: "@daily"}}, "not the Runner's"},
		{"id", []schedule.Schedule{{ID: "../a", Agent: agent, Cron: "@daily"}}, "schedule id"},
		{"policy", []schedule.Schedule{{ID: "a", Agent: agent, Cron: "@daily", Missed: "sometimes"}}, "missed"},
		{"dup", []schedule.Schedule{{ID: "a", Agent: agent, Cron: "@daily"}, {ID: "a", Agent: agent, Every: time.Hour}}, "twice"},
		{"agent and job", []schedule.Schedule{{ID: "a", Agent: agent, Cron: "@daily", Job: &lifecycle.ScheduleJob{JobType: "X"}}}, "set one of agent"},
		{"job input", []schedule.Schedule{{ID: "a", Cron: "@daily", Input: json.RawMessage(`{}`), Job: &lifecycle.ScheduleJob{JobType: "X"}}}, "job.payload"},
		{"job type", []schedule.Schedule{{ID: "a", Cron: "@daily", Job: &lifecycle.ScheduleJob{}}}, "job_type"},
		{"job payload", []schedule.Schedule{{ID: "a", Cron: "@daily", Job: &lifecycle.ScheduleJob{JobType: "X", Payload: json.RawMessage(`{`)}}}, "payload"},
		{"job attempts", []schedule.Schedule{{ID: "a", Cron: "@daily", Job: &lifecycle.ScheduleJob{JobType: "X", MaxAttempts: 101}}}, "max_attempts"},
		{"job lane", []schedule.Schedule{{ID: "a", Cron: "@daily", Job: &lifecycle.ScheduleJob{JobType: "X", AgentSlug: "../x"}}}, "agent_slug"},
		{"job id too long", []schedule.Schedule{{ID: strings.Repeat("a", 100), Cron: "@daily", Job: &lifecycle.ScheduleJob{JobType: "X"}}}, "as a job id"},
		{"job without a queue", []schedule.Schedule{{ID: "a", Cron: "@daily", Job: &lifecycle.ScheduleJob{JobType: "X"}}}, "needs a Queue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := schedule.New(schedule.Config{Runner: r, Store: memstore.New(), Schedules: tt.s})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error about %q", err, tt.want)
			}
		})
	}
}

func diff(want, got []string) string {
	w, g := map[string]bool{}, map[string]int{}
	for _, k := range want {
		w[k] = true
	}
	var out []string
	for _, k := range got {
		g[k]++
		if !w[k] || g[k] > 1 {
			out = append(out, "+"+k)
		}
	}
	for _, k := range want {
		if g[k] == 0 {
			out = append(out, "-"+k)
		}
	}
	return strings.Join(out, " ")
}

// TestPoisonStateIsQuarantined: a schedule's state that cannot be decoded
// is quarantined and the schedule goes on from its next slot; before, it
// failed every tick and the schedule never fired again. Listing the
// schedules writes nothing.
func TestPoisonStateIsQuarantined(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	ctx := context.Background()
	key, _ := layout.ScheduleKey("poisoned")
	if _, err := g.store.Put(ctx, key, []byte("{not json"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	p := g.start(nil, every5("poisoned"))
	g.settle(g.clock, 1)
	g.clock.Advance(5 * time.Minute)
	g.settle(g.clock, 1)
	if got := g.runs(p.runner); len(got) != 1 {
		t.Fatalf("runs after the poison state: %v, want the next slot's", got)
	}
	n := 0
	for q, err := range records.ListQuarantine(ctx, g.store) {
		if err != nil || q.Key != key {
			t.Fatalf("quarantine: %+v, %v", q, err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d records quarantined, want the poison state", n)
	}

	// A scheduler that never ran: its listing creates no state.
	other := newRig(t, nil)
	r, err := run.NewRunner(run.Config{Store: other.store, Clock: other.clock, Logger: quiet},
		run.Agent{Slug: agent, Steps: []run.Step{{Name: "x", Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := schedule.New(schedule.Config{Runner: r, Store: other.store, Clock: other.clock, Logger: quiet, Schedules: []schedule.Schedule{every5("listed")}})
	if err != nil {
		t.Fatal(err)
	}
	infos, err := s.List(ctx)
	if err != nil || len(infos) != 1 || !infos[0].Next.Equal(day0.Truncate(5*time.Minute).Add(5*time.Minute)) {
		t.Fatalf("List = %+v, %v", infos, err)
	}
	for k, err := range other.store.List(ctx, "") {
		t.Fatalf("List wrote %s (%v)", k, err)
	}
}
