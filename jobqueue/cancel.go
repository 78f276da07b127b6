package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// errCancelRequested is the cause a claim cancels its run with when it
// finds its job's cancel asked for: the handler's context ends with it.
var errCancelRequested = errors.New("jobqueue: job cancelled")

// cancelAsked tells whether d is a RUNNING job of the general machine
// whose cancel an operator asked for: its claim's next write ends it
// CANCELLED.
func cancelAsked(d *jobDoc) bool {
	return d.CancelRequestedAt != nil && d.Status == lifecycle.JobRunning && general(&d.Job)
}

// cancelRunning ends d, RUNNING with its cancel asked for, CANCELLED: the
// orchestration's move, made by the write of its claim (or its rescuer)
// that notices the request, whatever the attempt's outcome.
func cancelRunning(ctx context.Context, d *jobDoc) {
	if err := fire(ctx, d, machine.EventCancel, lifecycle.ActorOrchestration); err != nil {
		panic(fmt.Sprintf("jobqueue: cancel from %s refused: %v", d.Status, err)) // cancelAsked checked the state
	}
	msg := "cancelled by " + string(d.CancelRequestedBy)
	d.Error, d.ErrorCode, d.FailedStep, d.Lease = &msg, codes.JobCancelled, lifecycle.JobRunning, nil
	d.NextAttemptAt, d.ReadyKey = nil, ""
}

// cancel is Queue.Cancel.
func (q *admission) cancel(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.Job, error) {
	if err := authority.Check(actor, authority.Jobs, authority.UpdateStatus, authority.Scope{}); err != nil {
		return lifecycle.Job{}, err
	}
	cur, ver, err := q.jobs.read(ctx, jobID)
	if err == nil {
		err = confine(ctx, &cur.Job)
	}
	if err != nil {
		return lifecycle.Job{}, q.quar.quarantinedOr(ctx, jobID, err)
	}
	// Who may cancel is who the machine gives the operator's cancel to
	// (the admin): asked of a RUNNING job too, whose move the
	// orchestration makes.
	if err := cancellable(&cur.Job, actor); err != nil {
		return lifecycle.Job{}, err
	}
	var lane string
	d, _, err := q.jobs.update(ctx, jobID, &cur, ver, func(d *jobDoc, now time.Time) error {
		lane = ""
		if err := cancellable(&d.Job, actor); err != nil {
			return err
		}
		switch d.Status {
		case lifecycle.JobRunning:
			if d.CancelRequestedAt == nil { // asked once: the first request stands
				d.CancelRequestedAt, d.CancelRequestedBy = &now, actor
			}
			return nil
		default: // QUEUED, RETRY_BACKOFF: at once
			if err := fire(ctx, d, machine.EventCancel, actor); err != nil {
				return err
			}
			msg := "cancelled by " + string(actor)
			lane = d.ReadyKey
			d.Error, d.ErrorCode, d.FailedStep = &msg, codes.JobCancelled, ""
			d.ReadyKey, d.NextAttemptAt, d.Lease = "", nil, nil
			return nil
		}
	})
	if err != nil {
		return lifecycle.Job{}, err
	}
	if lane != "" {
		// The job first, its entry second: an entry left behind (this
		// delete failed) points at a job that is not waiting, which the
		// next claim of the lane or the sweep drops.
		q.lanes.deleteLane(ctx, q.lanes.sched.agent(d.AgentSlug), lane)
	}
	return d.Job, nil
}

// cancellable refuses a cancel of j by actor: a job of the spec's machine
// (no cancel in its table), a finished one (a *lifecycle.JobCancelError),
// an actor the machine does not give the cancel to.
func cancellable(j *lifecycle.Job, actor lifecycle.Actor) error {
	m := jobMachineOf(j)
	if m != machine.GeneralJobMachine() {
		return &lifecycle.JobCancelError{JobID: j.JobID, Status: j.Status, Machine: m.Name(), Finished: m.IsTerminal(j.Status) || j.Status == lifecycle.JobFailed}
	}
	if m.IsTerminal(j.Status) || j.Status == lifecycle.JobFailed {
		return &lifecycle.JobCancelError{JobID: j.JobID, Status: j.Status, Machine: m.Name(), Finished: true}
	}
	from := j.Status
	if from == lifecycle.JobRunning {
		from = lifecycle.JobQueued // the operator's move, as of a waiting job
	}
	return m.CheckActor(from, lifecycle.JobCancelled, actor)
}
