// Package schedule fires scheduled runs (status.json trigger "cron") and
// periodic jobs exactly once per slot, however many processes run a
// Scheduler on one store.
//
// A schedule names an agent (or a job: jobs.go says how a periodic job's
// slot is fired) and when to run it: a cron expression (five fields,
// parsed by github.com/robfig/cron/v3, in the schedule's time zone) or a
// fixed interval. Each slot, the time the expression names, starts one
// run through run.Runner.Submit with the idempotency key of docs/spec.md#idempotency,
// scheduler:{schedule_id}:{slot}, whose record is created create-only before
// the run: of the processes that fire a slot at once, each gets the one run
// of the slot, whoever wrote it (a process that loses the race writes the
// run itself if the winner has not yet). Losing that race is the normal
// case, not a failure. A process that dies between the record and the run
// leaves the slot pending, and any other process's next look (at the
// latest the next slot) creates the run under the same id, never a second
// one.
//
// Which slots are due is kept in the store, not in a process:
// schedules/{id}.json holds the latest slot dealt with (fired or skipped),
// advanced by compare-and-swap and only forward. So a process that starts
// late finds the slots missed while none ran, and applies the schedule's
// Missed policy to them; a clock that jumps back finds nothing due (the slot
// it would repeat is behind the state); a clock that jumps forward finds the
// slots in between due and fires them like missed ones (the default policy
// catches up, so none is skipped).
package schedule

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/quarantine"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// The policies of Schedule.Missed: what happens to slots that passed while
// no Scheduler fired them (an outage, a clock jump forward).
const (
	// MissedCatchUp fires the missed slots, oldest first, at most
	// Schedule.CatchUp of them (the most recent ones); older ones are
	// skipped. The default.
	MissedCatchUp = "catch_up"
	// MissedLatest fires the latest missed slot once and skips the others.
	MissedLatest = "latest"
	// MissedSkip fires no missed slot: the schedule goes on with the next.
	MissedSkip = "skip"
)

// DefaultCatchUp is how many missed slots MissedCatchUp fires when
// Schedule.CatchUp is 0.
const DefaultCatchUp = 12

// Schedule is one schedule: when to start which agent's run.
type Schedule = lifecycle.Schedule

// Info is a schedule as GET /schedules lists it: the schedule and where it
// stands, in one JSON object.
type Info = lifecycle.ScheduleInfo

// Progress is where a schedule stands.
type Progress = lifecycle.ScheduleProgress

// slots enumerates a schedule's slots.
type slots interface {
	// next returns the first slot after t.
	next(t time.Time) time.Time
}

type cronSlots struct {
	s   cron.Schedule
	loc *time.Location
}

func (c cronSlots) next(t time.Time) time.Time { return c.s.Next(t.In(c.loc)).UTC() }

type everySlots time.Duration

func (e everySlots) next(t time.Time) time.Time {
	d := time.Duration(e)
	return t.UTC().Truncate(d).Add(d)
}

// parser reads the five standard fields and descriptors, as crontab does.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// compile checks a schedule and returns its slots.
func compile(s *Schedule) (slots, error) {
	bad := func(format string, a ...any) error {
		return &lifecycle.InputError{Field: "schedule " + s.ID, Reason: fmt.Sprintf(format, a...)}
	}
	if err := storekey.ValidateID("schedule id", s.ID); err != nil {
		return nil, err
	}
	if err := checkTarget(s); err != nil {
		return nil, err
	}
	if s.Tenant != "" {
		if err := storekey.ValidateID("schedule "+s.ID+" tenant", s.Tenant); err != nil {
			return nil, err
		}
	}
	if s.Jitter < 0 || s.CatchUp < 0 {
		return nil, bad("negative jitter or catch_up")
	}
	switch s.Missed {
	case "":
		s.Missed = MissedCatchUp
	case MissedCatchUp, MissedLatest, MissedSkip:
	default:
		return nil, bad("missed %q: want catch_up, latest or skip", s.Missed)
	}
	if s.CatchUp == 0 {
		s.CatchUp = DefaultCatchUp
	}
	switch {
	case (s.Cron == "") == (s.Every == 0):
		return nil, bad("set exactly one of cron and every")
	case s.Every != 0:
		if s.Every < time.Second || s.Every%time.Second != 0 {
			return nil, bad("every %s: want whole seconds, at least 1s", s.Every)
		}
		if s.TimeZone != "" {
			return nil, bad("time_zone applies to cron only")
		}
		return everySlots(s.Every), nil
	}
	loc := time.UTC
	if s.TimeZone != "" {
		var err error
		if loc, err = time.LoadLocation(s.TimeZone); err != nil {
			return nil, bad("time_zone %q: %v", s.TimeZone, err)
		}
	}
	cs, err := parser.Parse(s.Cron)
	if err != nil {
		return nil, bad("cron %q: %v", s.Cron, err)
	}
	return cronSlots{s: cs, loc: loc}, nil
}

// jitter is the schedule's delay for one slot: the same in every process.
func jitter(s *Schedule, slot time.Time) time.Duration {
	if s.Jitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(s.ID))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(slot.UnixNano()))
	h.Write(b[:])
	return time.Duration(h.Sum64() % uint64(s.Jitter))
}

// Key is the idempotency key of a slot's run (docs/spec.md#idempotency),
// and the id of a periodic job's slot's job: the slot in RFC 3339 UTC,
// truncated to the second (no schedule is finer).
func Key(scheduleID string, slot time.Time) string {
	return "scheduler:" + scheduleID + ":" + slot.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// State is a schedule's record, schedules/{id}.json.
type State struct {
	lifecycle.Meta

	ScheduleID string `json:"schedule_id"`
	// LastSlot is the latest slot dealt with: fired, or skipped by the
	// Missed policy or a pause. Only slots after it are due.
	LastSlot time.Time `json:"last_slot"`
	// Pending is a slot being fired: claimed, its run perhaps not created
	// yet. The next firing finishes it first, whatever the Missed policy,
	// so a process that dies between the claim and the run leaves no slot
	// without its run.
	Pending *time.Time `json:"pending,omitempty"`
	// PendingAt is when Pending was claimed, or last taken over from a
	// process that did not finish it: a periodic job's claim on a store
	// that settles (jobs.go).
	PendingAt *time.Time `json:"pending_at,omitempty"`
	// LastFired is the latest slot that started a run (LastRunID) or
	// enqueued a job (LastJobID).
	LastFired *time.Time `json:"last_fired,omitempty"`
	LastRunID string     `json:"last_run_id,omitempty"`
	LastJobID string     `json:"last_job_id,omitempty"`
	Paused    bool       `json:"paused,omitempty"`
	// PausedBy names who paused it.
	PausedBy  string    `json:"paused_by,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Metrics counts what the Scheduler does, per schedule; all methods must be
// safe for concurrent use.
type Metrics interface {
	// SlotFired counts a slot whose run this process created; caughtUp
	// says the slot was a missed one.
	SlotFired(schedule string, caughtUp bool)
	// SlotSkipped counts slots skipped by the Missed policy or a pause.
	SlotSkipped(schedule string, n int)
	// DuplicateSuppressed counts a slot another process had fired already.
	DuplicateSuppressed(schedule string)
}

// Config configures a Scheduler.
type Config struct {
	// Runner submits the runs. Required when a schedule starts runs.
	Runner *run.Runner
	// Queue enqueues the periodic jobs. Required when a schedule has a
	// Job.
	Queue *jobqueue.Queue
	// Store holds the schedules' state: the Runner's and the Queue's
	// store. Required.
	Store *storage.Store
	// Schedules to fire. Ids must be unique.
	Schedules []Schedule
	// Clock: default the wall clock.
	Clock clock.Clock
	// Logger: default slog.Default().
	Logger *slog.Logger
	// Metrics: default none.
	Metrics Metrics
	// Grace is how late a slot may be fired and still count as on time,
	// not missed (beyond its jitter). Default 1 min.
	Grace time.Duration
	// PollInterval bounds the wait between two looks at the schedules'
	// state, so a pause, a resume or a slot fired elsewhere is noticed.
	// Default 30 s.
	PollInterval time.Duration
	// RetryInterval is how soon a schedule is looked at again after a
	// firing did not finish: the store failed, or the slot's run is still
	// being created by a submit that could not be helped yet. Default 1 s
	// (at most PollInterval).
	RetryInterval time.Duration
}

// Scheduler fires its schedules' slots; any number of Schedulers, in any
// number of processes, may share a store.
type Scheduler struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock
	slots map[string]slots
	byID  map[string]*Schedule
	wake  chan struct{}
	mu    sync.Mutex
	recs  map[string]*fence.Record[State, *State]
	quar  *quarantine.Mover
	// absent holds the evidence that a key read missing is missing, on a
	// store that settles: a schedule's state before it is created afresh,
	// a slot's job before another process's claim on it is taken over.
	absent  *evidence.Absence
	missing map[string]time.Time // missingSince's, by schedule id
}

// ErrUnknownSchedule: no schedule of that id is configured.
var ErrUnknownSchedule error = unknownSchedule{}

// unknownSchedule is ErrUnknownSchedule: a not-found to callers of
// lifecycle.Schedules.
type unknownSchedule struct{}

func (unknownSchedule) Error() string        { return "schedule: unknown schedule" }
func (unknownSchedule) Is(target error) bool { return target == lifecycle.ErrNotFound }

// New checks cfg and returns a Scheduler.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Store == nil {
		return nil, errors.New("schedule: Store is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Grace <= 0 {
		cfg.Grace = time.Minute
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 30 * time.Second
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	cfg.RetryInterval = min(cfg.RetryInterval, cfg.PollInterval)
	s := &Scheduler{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, slots: map[string]slots{}, byID: map[string]*Schedule{},
		wake: make(chan struct{}, 1), recs: map[string]*fence.Record[State, *State]{},
		quar: &quarantine.Mover{Store: cfg.Store, Clock: cfg.Clock, Log: cfg.Logger}, absent: &evidence.Absence{Settle: cfg.Store.SettleTime()}, missing: map[string]time.Time{}}
	agents := map[string]bool{}
	if cfg.Runner != nil {
		for _, a := range cfg.Runner.Agents() {
			agents[a.Slug] = true
		}
	}
	s.cfg.Schedules = append([]Schedule(nil), cfg.Schedules...)
	for i := range s.cfg.Schedules {
		sc := &s.cfg.Schedules[i]
		sl, err := compile(sc)
		if err != nil {
			return nil, err
		}
		if _, dup := s.byID[sc.ID]; dup {
			return nil, fmt.Errorf("schedule: id %s given twice", sc.ID)
		}
		switch {
		case sc.Job != nil && cfg.Queue == nil:
			return nil, fmt.Errorf("schedule %s: a periodic job needs a Queue", sc.ID)
		case sc.Job == nil && cfg.Runner == nil:
			return nil, fmt.Errorf("schedule %s: agent %s: no Runner to start its runs", sc.ID, sc.Agent)
		case sc.Job == nil && !agents[sc.Agent]:
			return nil, fmt.Errorf("schedule %s: agent %s is not the Runner's", sc.ID, sc.Agent)
		}
		s.slots[sc.ID], s.byID[sc.ID] = sl, sc
	}
	return s, nil
}

// record is the schedule's state record (its version cached between ticks).
func (s *Scheduler) record(id string) *fence.Record[State, *State] {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	if !ok {
		key, _ := layout.ScheduleKey(id) // the id was validated by New
		r = &fence.Record[State, *State]{Store: s.cfg.Store, Key: key, Validate: func(st *State) error {
			if st.ScheduleID != id {
				return fmt.Errorf("schedule_id %q at the key of schedule %s", st.ScheduleID, id)
			}
			return nil
		}}
		s.recs[id] = r
	}
	return r
}

// state reads a schedule's state, creating it the first time: a new
// schedule starts with the slot before now dealt with, so it fires from
// its next slot, not from the epoch. A state that cannot be decoded is
// quarantined and started afresh, like a new schedule's, rather than
// stopping the schedule for good.
func (s *Scheduler) state(ctx context.Context, id string) (State, error) {
	r := s.record(id)
	st, _, err := r.Load(ctx)
	var ce *lifecycle.QuarantinedError
	if errors.As(err, &ce) {
		if _, qerr := s.quar.Move(ctx, ce); qerr != nil && !errors.Is(qerr, storage.ErrPreconditionFailed) {
			return st, qerr
		}
		st, _, err = r.Load(ctx) // gone, or repaired meanwhile
	}
	settles := s.absent.Settle > 0
	if err == nil && settles {
		s.absent.Found(r.Key)
		s.missingSince(id, false)
	}
	if errors.Is(err, storage.ErrNotFound) {
		// On a store that settles one not-found is no proof: a state
		// created afresh over the real one would drop its pause, its
		// pending slot and its place. Created, it starts from the first
		// not-found, so the wait skips no slot.
		since := s.clock.Now()
		if settles {
			since = s.missingSince(id, true)
			if !s.absent.Confirmed(r.Key, s.clock.Now()) {
				return st, fmt.Errorf("%w: schedule %s: state read as missing", errUnsettled, id)
			}
			s.missingSince(id, false)
		}
		st = s.fresh(id, since)
		if _, err = r.Create(ctx, st); errors.Is(err, storage.ErrPreconditionFailed) {
			st, _, err = r.Load(ctx) // another process created it
		}
	}
	return st, err
}

// peek reads a schedule's state without writing: a schedule no process has
// fired yet reads as the state it will be created with.
func (s *Scheduler) peek(ctx context.Context, id string) (State, error) {
	st, _, err := s.record(id).Load(ctx)
	if errors.Is(err, storage.ErrNotFound) {
		return s.fresh(id, s.clock.Now()), nil
	}
	return st, err
}

func (s *Scheduler) fresh(id string, since time.Time) State {
	now := s.clock.Now().UTC()
	return State{ScheduleID: id, LastSlot: s.prev(id, since.UTC()), UpdatedAt: now}
}

// missingSince returns when this process first read schedule id's state
// as missing, since the last time it found it (now, the first time);
// with missing false it forgets that time.
func (s *Scheduler) missingSince(id string, missing bool) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !missing {
		delete(s.missing, id)
		return time.Time{}
	}
	t, ok := s.missing[id]
	if !ok {
		t = s.clock.Now()
		s.missing[id] = t
	}
	return t
}

// prev is the latest slot at or before t (or t itself if none is found
// within a year back).
func (s *Scheduler) prev(id string, t time.Time) time.Time {
	sl := s.slots[id]
	if e, ok := sl.(everySlots); ok {
		return t.UTC().Truncate(time.Duration(e))
	}
	// Walk forward from far enough back; cron has no Prev.
	for back := time.Hour; back <= 366*24*time.Hour; back *= 4 {
		var last time.Time
		for x := sl.next(t.Add(-back)); !x.After(t); x = sl.next(x) {
			last = x
		}
		if !last.IsZero() {
			return last
		}
	}
	return t
}

// Run fires the schedules until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	if len(s.cfg.Schedules) == 0 {
		<-ctx.Done()
		return nil
	}
	for {
		wait := s.tick(ctx)
		t := s.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-s.wake:
			t.Stop()
		case <-t.C():
		}
	}
}

// tick fires what is due of every schedule and returns how long to wait
// for the next slot (at most PollInterval).
func (s *Scheduler) tick(ctx context.Context) time.Duration {
	wait := s.cfg.PollInterval
	for i := range s.cfg.Schedules {
		sc := &s.cfg.Schedules[i]
		next, err := s.fire(ctx, sc)
		if err != nil {
			// Looked at again soon: a slot must not wait for the next poll.
			wait = min(wait, s.cfg.RetryInterval)
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, lifecycle.ErrIdempotencyInProgress), errors.Is(err, errUnsettled):
				// Its run or job is being created elsewhere, or a
				// not-found waits for its evidence: not a failure.
				s.log.LogAttrs(ctx, slog.LevelDebug, "schedule_slot_in_progress", slog.String("schedule", sc.ID), slog.String("error", err.Error()))
			default:
				s.log.LogAttrs(ctx, slog.LevelWarn, "schedule_failed", slog.String("schedule", sc.ID), slog.String("error", err.Error()))
			}
			continue
		}
		if d := next.Sub(s.clock.Now()); d < wait {
			wait = max(d, 0)
		}
	}
	return wait
}

// fire deals with one schedule's due slots and returns when its next slot
// is due (with its jitter).
func (s *Scheduler) fire(ctx context.Context, sc *Schedule) (time.Time, error) {
	st, err := s.state(ctx, sc.ID)
	if err != nil {
		return time.Time{}, err
	}
	if st.Pending != nil && st.Pending.After(st.LastSlot) {
		// A firing that did not finish (here or in a process that died).
		if err := s.start(ctx, sc, *st.Pending, true); err != nil {
			return time.Time{}, err
		}
		if st, err = s.state(ctx, sc.ID); err != nil {
			return time.Time{}, err
		}
	}
	now := s.clock.Now().UTC()
	sl := s.slots[sc.ID]
	// The due slots: after LastSlot, whose jittered time has come. Kept:
	// the newest CatchUp+1 of them (older ones are skipped by any policy),
	// and how many there were.
	keep := sc.CatchUp + 1
	var due []time.Time
	n := 0
	next := sl.next(st.LastSlot)
	for ; !next.Add(jitter(sc, next)).After(now); next = sl.next(next) {
		n++
		due = append(due, next)
		if len(due) > keep {
			due = due[1:]
		}
	}
	nextDue := next.Add(jitter(sc, next))
	if n == 0 {
		return nextDue, nil
	}
	last := due[len(due)-1]
	if st.Paused {
		// Slots while paused are skipped, not saved up for the resume.
		return nextDue, s.advance(ctx, sc, last, firing{}, n)
	}
	onTime := func(x time.Time) bool { return now.Sub(x) <= s.cfg.Grace+jitter(sc, x) }
	var fire []time.Time
	switch {
	case sc.Missed == MissedCatchUp:
		fire = due
		if !onTime(last) && len(fire) > sc.CatchUp {
			fire = fire[len(fire)-sc.CatchUp:]
		} else if onTime(last) && len(fire) > sc.CatchUp+1 {
			fire = fire[len(fire)-sc.CatchUp-1:]
		}
	case sc.Missed == MissedLatest || onTime(last):
		fire = []time.Time{last}
	}
	skipped := n - len(fire)
	if skipped > 0 && len(fire) > 0 {
		// The skipped slots come before the first fired one.
		if err := s.advance(ctx, sc, fire[0].Add(-time.Nanosecond), firing{}, skipped); err != nil {
			return nextDue, err
		}
		skipped = 0
	}
	for _, slot := range fire {
		if err := s.start(ctx, sc, slot, !onTime(slot)); err != nil {
			return nextDue, err
		}
	}
	if skipped > 0 {
		return nextDue, s.advance(ctx, sc, last, firing{}, skipped)
	}
	return nextDue, nil
}

// errDealtWith ends an Apply that finds the slot dealt with already.
var errDealtWith = errors.New("schedule: slot dealt with")

// start fires one slot: mark it pending, submit its run, then record it
// fired. Each step may be repeated by any process: the submit is
// idempotent by the slot's key (and answers only a run that exists), and
// the marks only move forward. A slot another process has dealt with
// meanwhile costs this one nothing more.
func (s *Scheduler) start(ctx context.Context, sc *Schedule, slot time.Time, caughtUp bool) error {
	var claim time.Time // when this call claimed the slot, if it did
	_, _, err := s.record(sc.ID).Apply(ctx, func(st *State) error {
		claim = time.Time{}
		if !slot.After(st.LastSlot) {
			return errDealtWith
		}
		if st.Pending != nil && st.Pending.Equal(slot) {
			return errDealtWith // pending already: nothing to write
		}
		p, now := slot, s.clock.Now().UTC()
		st.Pending, st.PendingAt, st.UpdatedAt = &p, &now, now
		claim = now
		return nil
	})
	if errors.Is(err, errDealtWith) {
		st, _ := s.record(sc.ID).Snapshot()
		if !slot.After(st.LastSlot) {
			s.cfg.Metrics.DuplicateSuppressed(sc.ID) // fired (or skipped) by another process
			return nil
		}
	} else if err != nil {
		return err
	}
	if sc.Job != nil {
		return s.startJob(ctx, sc, slot, caughtUp, claim)
	}
	res, err := s.cfg.Runner.Submit(creating(ctx, sc), lifecycle.SubmitRequest{AgentSlug: sc.Agent, Trigger: "cron",
		Input: sc.Input, IdempotencyKey: Key(sc.ID, slot)})
	var failed *run.IdempotencyFailedError
	if errors.As(err, &failed) {
		// The slot's run could not be created in all its attempts: the
		// slot is given up (logged), not retried until its record expires.
		s.log.LogAttrs(ctx, slog.LevelWarn, "schedule_slot_failed", slog.String("schedule", sc.ID),
			slog.Time("slot", slot), slog.String("error", err.Error()))
		return s.advance(ctx, sc, slot, firing{}, 1)
	}
	if err != nil {
		return fmt.Errorf("slot %s: %w", slot.Format(time.RFC3339), err)
	}
	if res.Duplicate {
		s.cfg.Metrics.DuplicateSuppressed(sc.ID)
	} else {
		s.cfg.Metrics.SlotFired(sc.ID, caughtUp)
		s.log.LogAttrs(ctx, slog.LevelInfo, "schedule_fired", slog.String("schedule", sc.ID),
			slog.Time("slot", slot), slog.String("runId", res.RunID), slog.Bool("caughtUp", caughtUp))
	}
	return s.advance(ctx, sc, slot, firing{runID: res.RunID}, 0)
}

// creating is ctx acting for sc's tenant, as the creator of a slot's run
// or job: the schedule's own state is no tenant's. The slot's run keeps
// its idempotency key, and its job its id, unscoped by the tenant
// (tenancy.Naming): processes that disagree on the tenant (one of an
// earlier release, or an edit rolling out) still fire a slot once.
func creating(ctx context.Context, sc *Schedule) context.Context {
	return tenancy.Naming(lifecycle.WithTenant(ctx, sc.Tenant))
}

// firing is what a fired slot started: its run or its job.
type firing struct{ runID, jobID string }

// advance moves the state's LastSlot forward to slot (never back), with
// the run or job a fired slot started; n slots skipped are counted by the
// process whose write skipped them.
func (s *Scheduler) advance(ctx context.Context, sc *Schedule, slot time.Time, f firing, skipped int) error {
	moved := false
	_, _, err := s.record(sc.ID).Apply(ctx, func(st *State) error {
		moved = false
		if !slot.After(st.LastSlot) {
			return nil
		}
		moved = true
		st.LastSlot, st.UpdatedAt = slot, s.clock.Now().UTC()
		if st.Pending != nil && !st.Pending.After(slot) {
			st.Pending, st.PendingAt = nil, nil
		}
		if (f.runID != "" || f.jobID != "") && (st.LastFired == nil || slot.After(*st.LastFired)) {
			at := slot
			st.LastFired, st.LastRunID, st.LastJobID = &at, f.runID, f.jobID
		}
		return nil
	})
	if err == nil && moved && skipped > 0 {
		s.cfg.Metrics.SlotSkipped(sc.ID, skipped)
		s.log.LogAttrs(ctx, slog.LevelInfo, "schedule_skipped", slog.String("schedule", sc.ID), slog.Int("slots", skipped), slog.Time("through", slot))
	}
	return err
}

// progress is where a schedule stands after st.
func (s *Scheduler) progress(id string, st State) Progress {
	return Progress{Next: s.slots[id].next(st.LastSlot), LastSlot: st.LastSlot, LastFired: st.LastFired,
		LastRunID: st.LastRunID, LastJobID: st.LastJobID, Paused: st.Paused, PausedBy: st.PausedBy}
}

// List returns every schedule with its state, by id.
func (s *Scheduler) List(ctx context.Context) ([]Info, error) {
	out := make([]Info, 0, len(s.cfg.Schedules))
	for i := range s.cfg.Schedules {
		sc := s.cfg.Schedules[i]
		st, err := s.peek(ctx, sc.ID) // a listing writes nothing
		if err != nil {
			return nil, err
		}
		out = append(out, Info{Schedule: sc, ScheduleProgress: s.progress(sc.ID, st)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Pause stops a schedule firing, in every process (they read the state at
// least every PollInterval); its slots until Resume are skipped. by names
// who paused it (at most 256 bytes of clean text).
func (s *Scheduler) Pause(ctx context.Context, id, by string) (Info, error) {
	return s.setPaused(ctx, id, true, by)
}

// Resume lets a paused schedule fire again from its next slot.
func (s *Scheduler) Resume(ctx context.Context, id string) (Info, error) {
	return s.setPaused(ctx, id, false, "")
}

func (s *Scheduler) setPaused(ctx context.Context, id string, paused bool, by string) (Info, error) {
	sc, ok := s.byID[id]
	if !ok {
		return Info{}, fmt.Errorf("%w: %s", ErrUnknownSchedule, id)
	}
	if err := codes.CheckText("paused_by", by, codes.MaxNameBytes, codes.OneLine); err != nil {
		return Info{}, err
	}
	if _, err := s.state(ctx, id); err != nil {
		return Info{}, err
	}
	now := s.clock.Now().UTC()
	_, st, err := s.record(id).Apply(ctx, func(st *State) error {
		if !paused && st.Paused {
			// Slots while paused are not saved up for the resume.
			st.LastSlot = s.prev(id, now)
		}
		st.Paused, st.PausedBy, st.UpdatedAt = paused, by, now
		if !paused {
			st.PausedBy = ""
		}
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return Info{Schedule: *sc, ScheduleProgress: s.progress(id, st)}, nil
}

type noMetrics struct{}

func (noMetrics) SlotFired(string, bool)     {}
func (noMetrics) SlotSkipped(string, int)    {}
func (noMetrics) DuplicateSuppressed(string) {}
