package jobqueue

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/maintenance"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// SweepReport counts what Sweep repaired.
type SweepReport struct {
	// Entries counts the entries of work in flight looked at: agent locks
	// and ready-lane entries (repair.go); finished jobs have none.
	Entries int
	Jobs    int // jobs read
	Rescued int // orphans moved to RETRY_BACKOFF
	Relaned int // lane entries recreated
	Buried  int // FAILED jobs moved to DEAD
	// Dropped counts lane entries deleted because their job had moved on
	// and their writer was long gone.
	Dropped int
	// Quarantined counts poison job records moved to quarantine/.
	Quarantined int
	// Skipped counts jobs the sweep could not repair (logged at WARN); the
	// sweep goes on past them.
	Skipped int
}

// sweeper is the sweep, a maintenance service: it sweeps a batch every
// period, when it is its worker's turn across the workers sharing the
// store (RunOnce), as a Worker does; all is one whole pass.
type sweeper struct {
	maintenance.Base
	store  *storage.Store
	jobs   *jobStore
	locks  *locks
	audit  *auditor
	repair *repairer
	sched  *scheduler
	quar   *quarantine
	batch  int // Config.SweepBatch
	asked  *reconcileAsked

	worker string // who takes the sweep's turn (every)
}

// every returns the sweeper of worker, sweeping every period (Base.Period,
// also how long its lease lasts).
func (q *sweeper) every(worker string, period time.Duration) *sweeper {
	c := *q
	c.worker, c.Period, c.Delay = worker, period, true
	c.Attrs = []slog.Attr{slog.String("worker", worker)}
	return &c
}

// all sweeps every entry of work in flight (Queue.Sweep).
func (q *sweeper) all(ctx context.Context) (SweepReport, error) {
	r, _, err := q.pass(ctx, "", 0)
	return r, err
}

// pass sweeps the in-flight entries (agent locks, lane entries) whose
// keys sort after after, at most limit of them (0: no limit). next is the
// key of the last entry swept when the limit cut the pass short, or ""
// when the pass reached the end.
func (q *sweeper) pass(ctx context.Context, after string, limit int) (r SweepReport, next string, err error) {
	last := ""
	seen := map[string]string{} // job id → its ready key as read ("" when none or gone)
	now := q.Clock.Now()
	for key, err := range q.store.List(ctx, layout.QueuePrefix) {
		if err != nil {
			return r, "", err
		}
		if key <= after {
			continue
		}
		agent, _, isLock := layout.ParseSlotLockKey(key) // any of a lane's locks
		laneAgent, _, laneJob, isLane := layout.ParseLaneKey(key)
		if !isLock && !isLane {
			continue // the sweep lease, or junk
		}
		if limit > 0 && r.Entries == limit {
			return r, last, nil // more entries follow
		}
		r.Entries++
		last = key
		if isLock {
			err = q.sweepLock(ctx, key, agent, now, seen, &r)
		} else {
			err = q.sweepLane(ctx, key, laneAgent, laneJob, now, seen, &r)
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, storage.ErrUnavailable) || storage.Transient(err) {
				return r, "", err // the store, not the job: the next sweep resumes here
			}
			// One job that cannot be repaired must not stop the sweep of
			// every other job for good.
			r.Skipped++
			q.Logger.LogAttrs(ctx, slog.LevelWarn, "sweep_skipped", slog.String("key", key), slog.String("error", err.Error()))
		}
	}
	return r, "", nil
}

// sweepLock sweeps the job an agent's lock names, if the lock is free: a
// held lock's job is its claim's to settle.
func (q *sweeper) sweepLock(ctx context.Context, key, agent string, now time.Time, seen map[string]string, r *SweepReport) error {
	rec := &fence.Record[agentLock, *agentLock]{Store: q.store, Key: key}
	lock, ver, err := rec.Load(ctx)
	if errors.Is(err, lifecycle.ErrCorrupt) || errors.Is(err, storage.ErrNotFound) {
		return nil // a junk lock is the next claim's to quarantine and remake
	}
	if err != nil {
		return err
	}
	if lock.JobID == "" || !lock.free(now) || lock.Agent != agent {
		return nil
	}
	if _, done := seen[lock.JobID]; done {
		return nil
	}
	d, err := q.sweepJobDoc(ctx, lock.JobID, seen, r)
	if err != nil || d == nil || pipelineState(d.Status) || d.Status == lifecycle.JobFailed || q.audit.hasAuditGap(d.JobID) {
		return err
	}
	// The job the free lock names is settled (its audit object written,
	// laned or at rest): the lock need not name it any more, so later
	// sweeps read the lock alone, not the job and its audit object every
	// time (an idle Worker's sweep read three objects per agent a minute).
	// A claim that took the lock meanwhile makes this write fail, harmlessly.
	free := agentLock{Meta: lock.Meta, Agent: agent, Epoch: lock.Epoch}
	if _, err := q.locks.writeLock(ctx, key, &free, ver); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		return err
	}
	return nil
}

// sweepJobDoc is sweepJobID for the job a free lock names: it settles the
// job (its audit object must be written, not only tried) and returns it as
// read, nil when it is gone.
func (q *sweeper) sweepJobDoc(ctx context.Context, jobID string, seen map[string]string, r *SweepReport) (*jobDoc, error) {
	d, err := q.sweepRead(ctx, jobID, seen, r)
	if d == nil {
		return nil, err
	}
	if err := q.audit.ensureAuditedErr(ctx, d); err != nil {
		return nil, err
	}
	if err := q.repair.repairJob(ctx, d, "", r); err != nil {
		return nil, err
	}
	return d, nil
}

// sweepLane sweeps the job of lane entry key, and deletes the entry when
// its job does not point back at it and it is no longer pending.
func (q *sweeper) sweepLane(ctx context.Context, key, agent, jobID string, now time.Time, seen map[string]string, r *SweepReport) error {
	ready, done := seen[jobID]
	if !done {
		var err error
		if ready, err = q.sweepJobID(ctx, jobID, key, seen, r); err != nil {
			return err
		}
	}
	if ready == key {
		return nil
	}
	// The job as read may be older than the entry (the sweep may have
	// repaired it since): read it afresh before deleting anything.
	d, _, err := q.jobs.read(ctx, jobID)
	var cur *jobDoc
	switch {
	case err == nil:
		cur = &d
	case errors.Is(err, lifecycle.ErrCorrupt):
		// Quarantined: its entry is garbage, whatever its age.
	case errors.Is(err, storage.ErrNotFound):
		// The entry may be the job's only pointer: it goes once the job
		// is gone, not on one not-found of a store that settles.
		if q.repair.lanePending(key, nil, now) || !q.jobs.gone(jobID, err) {
			return nil
		}
	default:
		return err
	}
	// A job in a pipeline state here has a lease not yet run out (the
	// sweep rescues the others), and may be reachable by this entry alone
	// (confirmPickup): the entry stays until the job leaves its pipeline.
	if cur != nil && (cur.ReadyKey == key || pipelineState(cur.Status) || q.repair.lanePending(key, cur, now)) {
		return nil
	}
	if err := q.store.Delete(ctx, key, storage.Condition{}); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	q.sched.agent(agent).forget()
	r.Dropped++
	return nil
}

// sweepJobID reads one job and repairs it (sweepJob); laned is a lane
// entry just listed, so known to exist. It returns the job's ready key.
func (q *sweeper) sweepJobID(ctx context.Context, jobID, laned string, seen map[string]string, r *SweepReport) (string, error) {
	d, err := q.sweepRead(ctx, jobID, seen, r)
	if d == nil {
		return "", err
	}
	return d.ReadyKey, q.sweepJob(ctx, d, laned, r)
}

// sweepRead reads one job for the sweep and notes it in seen and r; nil
// when it is gone (or quarantined: err then says so).
func (q *sweeper) sweepRead(ctx context.Context, jobID string, seen map[string]string, r *SweepReport) (*jobDoc, error) {
	seen[jobID] = ""
	d, _, err := q.jobs.read(ctx, jobID)
	if errors.Is(err, lifecycle.ErrCorrupt) {
		r.Quarantined++
	}
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r.Jobs++
	seen[jobID] = d.ReadyKey
	return &d, nil
}

// sweepJob repairs one job as Sweep describes. laned is a lane entry known
// to exist ("" when none is).
func (q *sweeper) sweepJob(ctx context.Context, d *jobDoc, laned string, r *SweepReport) error {
	q.audit.ensureAudited(ctx, d)
	return q.repair.repairJob(ctx, d, laned, r)
}

// sweepLease is the record at layout.SweepLeaseKey: the sweep's turn
// (maintenance.Turn). Its lease is not given back: its expiry spaces the
// sweeps.
type sweepLease struct {
	lifecycle.Meta
	lifecycle.Lease

	// Cursor is the key of the last entry swept when a batch ended before
	// the entries did; the next sweep goes on after it.
	Cursor string `json:"cursor,omitempty"`
	// Reconcile, while a reconcile pass is under way (reconcile.go), is
	// the key after which its next batch goes on.
	Reconcile string `json:"reconcile,omitempty"`
}

// TurnLease is the sweep's lease, for maintenance.Turn.
func (l *sweepLease) TurnLease() *lifecycle.Lease { return &l.Lease }

// turn is the sweep's turn across the workers sharing the store: due once
// the last sweep's lease (of every) ran out.
func (q *sweeper) turn() *maintenance.Turn[sweepLease, *sweepLease] {
	return &maintenance.Turn[sweepLease, *sweepLease]{
		Store: q.store, Key: layout.SweepLeaseKey, Owner: q.worker, Clock: q.Clock, TTL: q.Period,
		Due: func(l *sweepLease, now time.Time) bool { return !now.Before(l.ExpiresAt) },
		Quarantine: func(ctx context.Context, ce *lifecycle.QuarantinedError) error {
			if err := q.quar.poison(ctx, ce); !errors.Is(err, storage.ErrNotFound) {
				return err
			}
			return nil
		},
	}
}

// RunOnce sweeps the next batch if it is this worker's turn.
func (q *sweeper) RunOnce(ctx context.Context) error {
	_, _, err := q.ifDue(ctx)
	return err
}

// ifDue sweeps the next batch unless a worker swept within the period
// (Queue.SweepIfDue).
func (q *sweeper) ifDue(ctx context.Context) (r SweepReport, swept bool, err error) {
	rec, _, lease, err := q.turn().Take(ctx)
	if errors.Is(err, maintenance.ErrNotMyTurn) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	r, next, err := q.pass(ctx, lease.Cursor, q.batch)
	if err != nil {
		return r, true, err
	}
	from, asked := lease.Reconcile, false
	if from == "" && q.asked != nil && q.asked.Swap(false) {
		// Taken now, so a loss seen during the pass asks for another.
		from, asked = layout.JobsPrefix, true // every job key sorts after it
	}
	if from != "" {
		rr, more, err := q.reconcile(ctx, from, q.batch)
		r.add(rr)
		if err != nil {
			if asked {
				q.asked.Store(true) // not begun for good: the next sweep begins it
			}
			return r, true, err
		}
		from = more
		q.Logger.LogAttrs(ctx, slog.LevelInfo, "reconcile_batch", slog.Int("jobs", rr.Jobs),
			slog.Int("rescued", rr.Rescued), slog.Int("relaned", rr.Relaned), slog.Bool("done", more == ""))
	}
	_, _, err = rec.Apply(ctx, func(l *sweepLease) error {
		l.Cursor, l.Reconcile = next, from
		return nil
	})
	if err != nil && asked {
		q.asked.Store(true) // the pass did not start for good: ask again
	}
	if errors.Is(err, lifecycle.ErrLeaseLost) {
		err = nil // our lease ran out and another worker swept on
	}
	return r, true, err
}
