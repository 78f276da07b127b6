package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// release frees the agent lock if the claim still holds it.
func (c *Claim) release(ctx context.Context) {
	if c.untaken {
		// Its take was never written (pickupJoint): nothing to free, and
		// a lock this Queue kept goes back to the cache, as read.
		a, s := c.agent, c.slot
		a.mu.Lock()
		s.busyUntil = time.Time{}
		s.freed, s.freedVer = nil, ""
		if c.asRead != nil {
			s.freed, s.freedVer = c.asRead, c.lockVer
		}
		a.mu.Unlock()
		return
	}
	key, _ := layout.SlotLockKey(c.agent.name, c.slot.k)
	c.mu.Lock()
	l := agentLock{Meta: c.lockMeta, Agent: c.agent.name, Epoch: c.epoch, JobID: c.named}
	c.mu.Unlock()
	// Write with If-Match on the version we hold, even once ctx ended, but
	// within StopGrace: a store that cannot be reached must not hold a
	// stopping Worker (the lock then lapses at its expiry).
	rctx, cancel := c.r.grace.after(ctx)
	defer cancel()
	v, err := putLock(rctx, c.r.store, key, &l, c.lockVer)
	if err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		c.r.log.WarnContext(ctx, "jobqueue: releasing agent lock", "agent", c.agent.name, "err", err)
	}
	a, s := c.agent, c.slot
	a.mu.Lock()
	s.busyUntil = time.Time{} // free: this Queue may claim it at once
	s.freed, s.freedVer = nil, ""
	if err == nil {
		s.freed, s.freedVer = &l, v
	}
	a.mu.Unlock()
}

// end ends a claim that ran (or was abandoned) and asks for a look at the
// agent at once: its lane may hold more work. When the job left its
// pipeline state under the claim (its record says so: ran_epoch), the
// agent lock is kept as it is, not released: this Queue's next claim of
// the agent takes it over by compare-and-swap (one write instead of a
// release and a take), and another process that finds it held reads the
// job it names and, seeing that job's run under the lock's epoch ended,
// takes it as free (claimer.lockEnded); unused, it lapses at its expiry.
// A Worker releases the locks it kept when it stops (locks.releaseKept).
// A claim that has not settled its job (still in a pipeline state after a
// failed write or a lost lease; laned, buried or audited not yet: named)
// releases the lock still naming the job (repair.go), for the next claim
// of the agent or the sweep to repair.
func (c *Claim) end(ctx context.Context) {
	c.mu.Lock()
	keep := !pipelineState(c.job.Status) && c.doc.RanEpoch == c.epoch && c.named == ""
	c.mu.Unlock()
	if keep {
		l := agentLock{Meta: c.lockMeta, Agent: c.agent.name, Owner: c.worker, Epoch: c.epoch, JobID: c.job.JobID}
		a, s := c.agent, c.slot
		a.mu.Lock()
		s.busyUntil = time.Time{}
		s.freed, s.freedVer = &l, c.lockVer
		a.mu.Unlock()
	} else {
		c.release(ctx)
	}
	c.agent.mu.Lock()
	c.slot.running = false
	counted := c.counted
	c.counted = false
	c.agent.mu.Unlock()
	now := c.r.clock.Now()
	if counted {
		c.r.caps.ended(c.agent, now)
	}
	c.r.sched.schedule(c.agent, now)
}

// Abandon gives the claim up without running it: the job goes back to
// RETRY_BACKOFF as a failed attempt and the agent lock is released.
func (c *Claim) Abandon(ctx context.Context) error {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return nil
	}
	c.done = true
	step := c.job.Status
	c.mu.Unlock()
	defer c.end(ctx)
	_, err := c.fail(ctx, step, codes.JobHandlerError, "claim abandoned")
	return err
}

// write runs mutate on the job only while the claim's lease holds.
func (c *Claim) write(ctx context.Context, mutate func(d *jobDoc, now time.Time) error) (lifecycle.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeLocked(ctx, mutate)
}

// writeLocked is write with c.mu held.
func (c *Claim) writeLocked(ctx context.Context, mutate func(d *jobDoc, now time.Time) error) (lifecycle.Job, error) {
	doc, ver, _, err := c.r.jobs.updateJoint(ctx, c.job.JobID, &c.doc, c.ver, c.worker, c.epoch, mutate, nil)
	if err == nil {
		c.job, c.doc, c.ver = doc.Job, doc, ver
	}
	return doc.Job, err
}

// writeJoint is write whose write carries joint's writes in one commit,
// all or none (jobStore.updateJoint); joint nil is write.
func (c *Claim) writeJoint(ctx context.Context, mutate func(d *jobDoc, now time.Time) error, joint func(*jobDoc) ([]storage.Write, error)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	doc, ver, _, err := c.r.jobs.updateJoint(ctx, c.job.JobID, &c.doc, c.ver, c.worker, c.epoch, mutate, joint)
	if err == nil {
		c.job, c.doc, c.ver = doc.Job, doc, ver
	}
	return err
}

func (c *Claim) move(ctx context.Context, event lifecycle.Event, set func(d *jobDoc)) error {
	_, err := c.write(ctx, func(d *jobDoc, _ time.Time) error {
		if err := fire(ctx, d, event, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		if set != nil {
			set(d)
		}
		return nil
	})
	return err
}

// settled records that the claim's job left the pipeline for good or for
// its lane: the lock need no longer name it.
func (c *Claim) settled() {
	c.mu.Lock()
	if !c.r.audit.hasAuditGap(c.named) {
		c.named = ""
	}
	c.mu.Unlock()
}

// heartbeat renews the agent lock and the job's lease LeaseTTL/3 after
// the last renewal until stop is called; when renewal finds the lease lost
// it cancels the run with lifecycle.ErrLeaseLost, and when it finds the
// job's cancel asked for, with errCancelRequested.
func (c *Claim) heartbeat(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	last := func() time.Time { return time.Unix(0, c.renewedAt.Load()) }
	return fence.Heartbeat(ctx, c.r.clock, c.r.leaseTTL/3, last, func(ctx context.Context) bool {
		err := c.renew(ctx)
		switch {
		case errors.Is(err, lifecycle.ErrLeaseLost):
			cancel(err)
			return false
		case err == nil && c.cancelAsked():
			// The renewal read the request (Queue.Cancel): the handler's
			// context ends; the attempt's write ends the job CANCELLED.
			cancel(errCancelRequested)
			return false
		case err != nil && ctx.Err() == nil:
			c.r.log.WarnContext(ctx, "jobqueue: heartbeat", "job_id", c.Job().JobID, "err", err)
		}
		return true
	})
}

func (c *Claim) renew(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || !pipelineState(c.job.Status) {
		return nil // finished: nothing left to keep alive
	}
	key, _ := layout.SlotLockKey(c.agent.name, c.slot.k)
	now := c.r.clock.Now()
	l := agentLock{Meta: c.lockMeta, Agent: c.agent.name, Owner: c.worker, Epoch: c.epoch, JobID: c.job.JobID, ExpiresAt: now.Add(c.r.leaseTTL)}
	v, err := putLock(ctx, c.r.store, key, &l, c.lockVer)
	if errors.Is(err, storage.ErrPreconditionFailed) {
		return fmt.Errorf("%w: agent lock of %s taken over", lifecycle.ErrLeaseLost, c.agent.name)
	}
	if err != nil {
		return err
	}
	c.lockVer, c.lockMeta = v, l.Meta
	_, err = c.writeLocked(ctx, func(d *jobDoc, now time.Time) error {
		l := *d.Lease
		l.ExpiresAt = now.Add(c.r.leaseTTL)
		d.Lease = &l // replace, never write through: update's cache shares pointers
		return nil
	})
	if err == nil {
		c.renewedAt.Store(now.UnixNano())
	}
	return err
}

// cancelAsked tells whether the job as the claim last wrote it has its
// cancel asked for.
func (c *Claim) cancelAsked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cancelAsked(&c.doc)
}

// confirm makes sure, just before a write that the job record's
// compare-and-swap cannot fence (the artifact), that the claim still holds
// its lease: by the clock while more than a tenth of LeaseTTL is left,
// else by renewing it (a fenced write). A claim that woke up from a pause
// past its lease gets lifecycle.ErrLeaseLost here and writes nothing; one paused
// between this check and the write can still create the artifact, which
// the next attempt replaces (artifact.Draft.Epoch).
func (c *Claim) confirm(ctx context.Context) error {
	c.mu.Lock()
	l := c.doc.Lease
	c.mu.Unlock()
	if l != nil && fence.LeaseCertain(l.ExpiresAt, c.r.clock.Now(), c.r.leaseTTL) {
		return nil
	}
	return c.renew(ctx)
}
