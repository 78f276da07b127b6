package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Periodic jobs: a schedule with a Job enqueues, at each slot, the job
// whose id is the slot's key (Key). The job id is the slot's one
// creation: of the processes that enqueue it, one creates it and the
// others are refused as existing (lifecycle.ErrJobExists), which is
// firing too.
//
// On a store that settles at once that is all: a create-only write is
// exact, so every process that finds the slot due enqueues its job at once
// (a process that dies between its claim and the job leaves the slot
// pending, and the next one to look enqueues it).
//
// On a store that settles (storage.SettleTime > 0) a create-only write may
// land over an existing job, and a read may answer not found for one, for
// up to Settle after a disturbance. A job created again over its slot's
// job would replace it: a COMPLETE or DEAD job queued again with fresh
// attempts. The queue's own checks do not stop that: its read of the id
// before the create is fooled by the same disturbance that accepts the
// create (a false not-found, then the create over the job), and its
// quarantine at pickup catches only a job created over one that left an
// artifact (a DEAD job left none, and runs again). Every process enqueuing
// every slot at once would offer that pair of faults an existing job at
// every slot. So there the slot's claim decides who enqueues:
//
//   - the process whose write claimed the slot (State.Pending, PendingAt)
//     enqueues its job at once, within Settle/2 of the claim (a write it
//     cannot finish by then is left to a takeover, so it never lands on a
//     job created by one);
//   - any other process, or the claimant later, reads the job: found, the
//     slot is fired; read missing, it waits until the job has been read
//     missing Settle apart (evidence.Absence) and the claim is Settle old,
//     then takes the claim over by compare-and-swap (PendingAt) and
//     enqueues it, so two takers never both create it.
//
// A claimant that dies is taken over after Settle plus RetryInterval.

// errUnsettled: a slot's job or a schedule's state read as missing, not yet
// believed (the evidence needs a read Settle later), or a claim not yet
// lapsed. Not a failure: looked at again after RetryInterval.
var errUnsettled = errors.New("schedule: waiting for the store to settle")

// checkTarget checks a schedule's target: an agent's run, or a job.
func checkTarget(s *Schedule) error {
	bad := func(format string, a ...any) error {
		return &lifecycle.InputError{Field: "schedule " + s.ID, Reason: fmt.Sprintf(format, a...)}
	}
	j := s.Job
	if j == nil {
		return storekey.ValidateID("agent", s.Agent)
	}
	switch {
	case s.Agent != "":
		return bad("set one of agent (a run) and job (a periodic job); the job's lane is job.agent_slug")
	case len(s.Input) > 0:
		return bad("input is a run's; a periodic job has job.payload")
	case j.JobType == "":
		return bad("job.job_type is required")
	case len(j.Payload) > 0 && !json.Valid(j.Payload):
		return bad("job.payload is not valid JSON")
	case j.MaxAttempts < 0 || j.MaxAttempts > 100:
		return bad("job.max_attempts %d outside 0..100", j.MaxAttempts)
	case j.AgentSlug != "":
		if err := storekey.ValidateID("job.agent_slug", j.AgentSlug); err != nil {
			return err
		}
	}
	// Each slot's job id is the slot's key: an id too long for one would
	// give every slot up, so it is refused here.
	return storekey.ValidateID("schedule id as a job id", Key(s.ID, time.Time{}))
}

// startJob enqueues the job of a slot marked pending; claim is when this
// call claimed it (zero: the slot was pending already).
func (s *Scheduler) startJob(ctx context.Context, sc *Schedule, slot time.Time, caughtUp bool, claim time.Time) error {
	id := Key(sc.ID, slot)
	settle := s.absent.Settle
	if settle > 0 && (claim.IsZero() || s.clock.Now().Sub(claim) >= settle/2) {
		var err error
		if claim, err = s.takeOver(ctx, sc, slot, id); err != nil || claim.IsZero() {
			return err
		}
	}
	ectx := ctx
	if settle > 0 {
		// A claim's write that cannot finish within Settle/2 is given up,
		// and left to a takeover (which waits Settle).
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, settle/2-s.clock.Now().Sub(claim))
		defer cancel()
	}
	j := sc.Job
	_, err := s.cfg.Queue.InsertJob(creating(ectx, sc), jobqueue.NewJob{JobID: id, JobType: j.JobType, AgentSlug: j.AgentSlug,
		Payload: j.Payload, MaxAttempts: j.MaxAttempts})
	switch {
	case err == nil:
		s.cfg.Metrics.SlotFired(sc.ID, caughtUp)
		s.log.LogAttrs(ctx, slog.LevelInfo, "schedule_fired", slog.String("schedule", sc.ID),
			slog.Time("slot", slot), slog.String("jobId", id), slog.Bool("caughtUp", caughtUp))
	case errors.Is(err, lifecycle.ErrJobExists):
		s.cfg.Metrics.DuplicateSuppressed(sc.ID)
	case errors.Is(err, lifecycle.ErrInvalidJob), errors.Is(err, lifecycle.ErrForbiddenActor):
		// The queue refuses the job as configured: no retry mends it.
		s.log.LogAttrs(ctx, slog.LevelWarn, "schedule_slot_failed", slog.String("schedule", sc.ID),
			slog.Time("slot", slot), slog.String("error", err.Error()))
		return s.advance(ctx, sc, slot, firing{}, 1)
	default:
		return fmt.Errorf("slot %s: job %s: %w", slot.Format(time.RFC3339), id, err)
	}
	return s.advance(ctx, sc, slot, firing{jobID: id}, 0)
}

// takeOver is a look at a pending slot's job on a store that settles by a
// process that did not just claim it: the slot is fired if the job is
// found; else, once the job's absence and the claim's age are Settle old,
// the claim is taken over and its time returned. A zero time and no error:
// the slot is dealt with. errUnsettled: not yet.
func (s *Scheduler) takeOver(ctx context.Context, sc *Schedule, slot time.Time, id string) (time.Time, error) {
	// Read as every tenant's: the slot's job is whichever tenant's process
	// made it, and a found read must not be lost to a tenant's view.
	_, err := s.cfg.Queue.Job(lifecycle.WithTenant(ctx, lifecycle.AllTenants), id)
	var qe *lifecycle.QuarantinedError
	switch {
	case err == nil || errors.As(err, &qe):
		// Found (a found read is never wrong), or found created twice
		// and quarantined: either way the slot fired.
		s.absent.Found(id)
		s.cfg.Metrics.DuplicateSuppressed(sc.ID)
		return time.Time{}, s.advance(ctx, sc, slot, firing{jobID: id}, 0)
	case !errors.Is(err, storage.ErrNotFound):
		return time.Time{}, err
	}
	now := s.clock.Now().UTC()
	st, _ := s.record(sc.ID).Snapshot()
	var held time.Time
	if st.PendingAt != nil {
		held = *st.PendingAt // none: claimed by a release before claims were timed
	}
	if !s.absent.Confirmed(id, now) || now.Sub(held) < s.absent.Settle {
		return time.Time{}, fmt.Errorf("%w: job %s read as missing, claimed at %s", errUnsettled, id, held.Format(time.RFC3339))
	}
	var took time.Time
	_, _, err = s.record(sc.ID).Apply(ctx, func(st *State) error {
		took = time.Time{}
		switch {
		case !slot.After(st.LastSlot) || st.Pending == nil || !st.Pending.Equal(slot):
			return errDealtWith
		case st.PendingAt != nil && !st.PendingAt.Equal(held):
			return errUnsettled // taken over by another process meanwhile
		}
		st.PendingAt, st.UpdatedAt = &now, now
		took = now
		return nil
	})
	switch {
	case errors.Is(err, errDealtWith):
		return time.Time{}, nil
	case errors.Is(err, errUnsettled):
		return time.Time{}, fmt.Errorf("%w: slot %s taken over by another process", errUnsettled, slot.Format(time.RFC3339))
	case err != nil:
		return time.Time{}, err
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "schedule_slot_taken_over", slog.String("schedule", sc.ID),
		slog.Time("slot", slot), slog.String("jobId", id), slog.Time("claimedAt", held))
	return took, nil
}
