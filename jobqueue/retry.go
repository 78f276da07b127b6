package jobqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// retries sends a failed attempt to RETRY_BACKOFF (and its lane) or on to
// FAILED and DEAD.
type retries struct {
	jobs    *jobStore
	lanes   *lanes
	backoff []time.Duration                  // Config.Backoff
	types   map[lifecycle.JobType]TypeConfig // their Backoff and BackoffFunc
}

func (c *Claim) fail(ctx context.Context, step lifecycle.JobState, code, msg string) (lifecycle.Job, error) {
	var lane string
	var at time.Time
	job, err := c.write(ctx, func(d *jobDoc, now time.Time) error {
		lane = "" // a write retried on a conflict judges afresh
		if step == lifecycle.JobArtifactWrite {
			if err := toArtifactWrite(context.WithoutCancel(ctx), d); err != nil {
				return err
			}
			d.AuditArtifact = c.artCreated // created, then the commit failed
		}
		failed := step
		if general(&d.Job) {
			failed = d.Status // RUNNING, its one pipeline state, whichever part of it failed
		}
		c.r.retries.retry(ctx, d, now, failed, code, msg)
		d.RanEpoch = c.epoch
		if d.NextAttemptAt != nil {
			lane, at = d.ReadyKey, *d.NextAttemptAt
		}
		return nil
	})
	if err != nil {
		return job, err
	}
	switch {
	case job.Status == lifecycle.JobFailed: // permanent: no retry
		job, err = c.r.retries.bury(ctx, job.JobID, nil, "")
	case lane != "":
		err = c.r.lanes.putLane(ctx, lane, job.JobID, at)
	}
	if err == nil {
		c.settled()
	}
	return job, err
}

// retry fires retryable_error on d (a pipeline state) and schedules the
// next attempt; a permanent failure (code PERMANENT) goes on to FAILED in
// the same write instead, and a RUNNING job whose cancel was asked for
// ends CANCELLED (cancelRunning), whatever its attempt's error.
func (q *retries) retry(ctx context.Context, d *jobDoc, now time.Time, step lifecycle.JobState, code, msg string) {
	// The moves are judged on the record alone: a context that ends while
	// the write is under way (a Worker stopping) must not make the machine
	// refuse them (the store calls still honour it).
	ctx = context.WithoutCancel(ctx)
	if cancelAsked(d) {
		cancelRunning(ctx, d)
		return
	}
	if err := fire(ctx, d, machine.EventRetryableError, lifecycle.ActorOrchestration); err != nil {
		panic(fmt.Sprintf("jobqueue: retryable_error from %s refused: %v", d.Status, err)) // the table has it from every pipeline state
	}
	d.Error, d.ErrorCode, d.FailedStep, d.Lease = &msg, code, step, nil
	// The move keeps its attempt's error: the record keeps only the last,
	// the audit log every attempt's (the job page shows each).
	m := &d.Trail[len(d.Trail)-1]
	m.ErrorCode, m.Error = code, msg
	if code == codes.JobPermanent {
		// No wait: backoff_elapsed's guard sends it to FAILED at once.
		if err := fire(ctx, d, machine.EventBackoffElapsed, lifecycle.ActorOrchestration); err != nil {
			panic(fmt.Sprintf("jobqueue: backoff_elapsed of a permanent failure refused: %v", err))
		}
		d.NextAttemptAt, d.ReadyKey = nil, ""
		return
	}
	next := now.Add(q.waitFor(&d.Job))
	d.NextAttemptAt, d.ReadyKey = &next, laneKeyOf(&d.Job, next) // of its priority
}

// bury moves a FAILED job to DEAD (max retries exceeded).
func (q *retries) bury(ctx context.Context, jobID string, cached *jobDoc, ver storage.Version) (lifecycle.Job, error) {
	d, _, err := q.jobs.update(ctx, jobID, cached, ver, func(d *jobDoc, _ time.Time) error {
		if d.Status != lifecycle.JobFailed {
			return nil // buried by someone else, or requeued
		}
		return fire(ctx, d, machine.EventBury, lifecycle.ActorOrchestration)
	})
	return d.Job, err
}

// pipelineState tells whether s is a state a worker holds a job in under
// its lease: the spec machine's three, the general machine's RUNNING.
func pipelineState(s lifecycle.JobState) bool {
	return s == lifecycle.JobContextAssembly || s == lifecycle.JobNotebookLMCall || s == lifecycle.JobArtifactWrite || s == lifecycle.JobRunning
}

// rescue moves an orphan (a job in a pipeline state whose worker's lease
// ran out) to RETRY_BACKOFF as a failed attempt, taking the lease away so
// that its old worker can no longer write. epoch is the rescuer's agent
// lock epoch, newer than the orphan's.
func (q *retries) rescue(ctx context.Context, jobID string, epoch int64) error {
	var lane string
	var at time.Time
	job, _, err := q.jobs.update(ctx, jobID, nil, "", func(d *jobDoc, now time.Time) error {
		lane = ""
		if !pipelineState(d.Status) || d.Lease != nil && d.Lease.Epoch >= epoch && now.Before(d.Lease.ExpiresAt) {
			return nil
		}
		msg := "orphan without a lease"
		if d.Lease != nil {
			msg = fmt.Sprintf("lease of %s (epoch %d) expired", d.Lease.Owner, d.Lease.Epoch)
		}
		q.retry(ctx, d, now, d.Status, codes.JobLeaseExpired, msg)
		if d.NextAttemptAt != nil { // not cancelled
			lane, at = d.ReadyKey, *d.NextAttemptAt
		}
		return nil
	})
	if err != nil || lane == "" {
		return err
	}
	return q.lanes.putLane(ctx, lane, job.JobID, at)
}
