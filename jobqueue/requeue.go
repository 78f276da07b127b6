package jobqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// requeue is Queue.Requeue.
func (q *admission) requeue(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.Job, error) {
	if err := authority.Check(actor, authority.Jobs, authority.UpdateStatus, authority.Scope{}); err != nil {
		return lifecycle.Job{}, err
	}
	// The lane entry first, the job second (repair.go): the job's agent
	// comes from a read before the write.
	cur, ver, err := q.jobs.read(ctx, jobID)
	if err == nil {
		err = confine(ctx, &cur.Job)
	}
	if err != nil {
		return lifecycle.Job{}, q.quar.quarantinedOr(ctx, jobID, err)
	}
	probe := cur
	probe.Trail = nil
	if err := fire(ctx, &probe, machine.EventRequeue, actor); err != nil {
		return lifecycle.Job{}, err // refused as the record stands: no lane entry written
	}
	if err := q.uniqueRequeueCheck(ctx, jobID); err != nil {
		return lifecycle.Job{}, err
	}
	if err := q.locks.ensureAgent(ctx, cur.AgentSlug); err != nil {
		return lifecycle.Job{}, err
	}
	at := q.clock.Now().UTC()
	lane := laneKeyOf(&cur.Job, at) // of its priority
	undo, err := q.lanes.putLaneFirst(ctx, lane, jobID, at)
	if err != nil {
		return lifecycle.Job{}, err
	}
	d, _, err := q.jobs.update(ctx, jobID, &cur, ver, func(d *jobDoc, now time.Time) error {
		if d.AgentSlug != cur.AgentSlug {
			return fmt.Errorf("jobqueue: job %s changed agent", jobID)
		}
		if err := fire(ctx, d, machine.EventRequeue, actor); err != nil {
			return err
		}
		d.Attempt, d.Error, d.ErrorCode, d.FailedStep = 0, nil, "", ""
		d.QueuedAt, d.ReadyKey, d.NextAttemptAt, d.Lease = &now, lane, nil, nil
		return nil
	})
	if err != nil {
		undoUnlessLanded(undo, err)
		return lifecycle.Job{}, err
	}
	q.lanes.relaneIfSlow(ctx, lane, jobID, at)
	q.lanes.laneAdded(cur.AgentSlug, lane)
	return d.Job, nil
}
