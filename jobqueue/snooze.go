package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Snooze is what the Handler of a job type of your own returns to run its
// job again later: the job goes back to QUEUED, to start no earlier than
// d from now (by the queue's clock; d ≤ 0: as soon as a worker is free),
// and the attempt is given back, so a job may snooze any number of times
// without using up its max_attempts or being marked failed. Its error and
// error code stay those of its last failed attempt, if any. The move
// (snooze, RUNNING → QUEUED) is on the job's timeline and in the audit
// log. Only the general machine snoozes: a job of an NLM type whose
// handler returns Snooze fails its attempt, as the spec's machine has no
// such move. A cancel asked for while the handler ran wins: the job ends
// CANCELLED.
func Snooze(d time.Duration) error { return &snoozeError{d: max(0, min(d, maxDelay))} }

// snoozeError is Snooze's error.
type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snooze %s", e.d) }

// snoozed tells whether err asks for a snooze, and for how long.
func snoozed(err error) (time.Duration, bool) {
	se, ok := errors.AsType[*snoozeError](err)
	if !ok {
		return 0, false
	}
	return se.d, true
}

// snooze ends the claim's attempt by the handler's Snooze(wait): one
// fenced write RUNNING → QUEUED (snooze) with attempt given back and the
// lane key of its new ready time, then its lane entry, under the agent's
// lock as a retry's is (so a claim that dies between the two leaves the
// job named by the lock, and the repair relanes it by its ready_key).
func (c *Claim) snooze(ctx context.Context, wait time.Duration) (lifecycle.Job, error) {
	if errors.Is(context.Cause(ctx), lifecycle.ErrLeaseLost) {
		return c.Job(), context.Cause(ctx)
	}
	if ctx.Err() != nil {
		// Stopping: the snooze is still written, within StopGrace.
		ectx, cancel := c.r.grace.after(ctx)
		defer cancel()
		ctx = ectx
	}
	var (
		lane string
		at   time.Time
	)
	job, err := c.write(ctx, func(d *jobDoc, now time.Time) error {
		lane = "" // a write retried on a conflict judges afresh
		d.RanEpoch = c.epoch
		mctx := context.WithoutCancel(ctx)
		if cancelAsked(d) {
			cancelRunning(mctx, d)
			return nil
		}
		if err := fire(mctx, d, machine.EventSnooze, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		// A snooze is no attempt: pickup counted it, so it is given back
		// (River's choice too, since its 0.16: a snoozing job never runs
		// out of attempts, and attempt stays the count of real tries).
		d.Attempt = max(0, d.Attempt-1)
		d.Lease = nil
		at = now.Add(wait)
		d.QueuedAt, d.ScheduledAt = &now, nil
		if at.After(now) {
			d.ScheduledAt = &at
		}
		d.ReadyKey = laneKeyOf(&d.Job, at)
		lane = d.ReadyKey
		return nil
	})
	if err != nil {
		return job, err
	}
	if lane != "" {
		if err := c.r.lanes.putLane(ctx, lane, job.JobID, at); err != nil {
			return job, err
		}
	}
	c.settled()
	return job, nil
}
