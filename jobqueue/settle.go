package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// On a store that settles (storage.SettleTime > 0, a distributed MinIO)
// a read may answer not found for a job that exists, and a create-only
// write may land over one, for a bounded time after a disturbance. The
// queue's decisions that cannot be undone rest on more than one answer:
//
//   - a lane entry, or the lock's naming of an orphan, is the last pointer
//     to its job: it goes only once the job is gone (gone: read missing
//     again at least Settle later, evidence.Absence);
//   - an Enqueue reads the id first, so a create accepted over an existing
//     job needs a false not-found too; and a job so created over one that
//     already ran (its artifact is older than the record) is quarantined
//     at its first pickup, never run again (createdTwice).
//
// On a store that settles at once none of this reads or waits.

// gone tells whether err, from a read of jobID, shows the job is gone for
// good: quarantined, or not found and (on a store that settles) read
// missing again Settle after a first not-found.
func (q *jobStore) gone(jobID string, err error) bool {
	switch {
	case errors.Is(err, lifecycle.ErrCorrupt):
		return true
	case errors.Is(err, storage.ErrNotFound):
		return q.absent.Confirmed(jobID, q.clock.Now())
	}
	return false
}

// errUnsettled: a job read missing that is not yet believed gone (gone).
var errUnsettled = errors.New("jobqueue: job read as missing, not yet confirmed")

// existsBeforeCreate is Enqueue's read of the id on a store that settles:
// a job found is lifecycle.ErrJobExists (a found read is never wrong), whatever a
// create-only write would have answered.
func (q *jobStore) existsBeforeCreate(ctx context.Context, key, jobID string) error {
	if q.absent.Settle <= 0 {
		return nil
	}
	_, _, err := q.store.Get(ctx, key)
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s", lifecycle.ErrJobExists, jobID)
	case errors.Is(err, storage.ErrNotFound):
		return nil
	}
	return err
}

// twiceCheck finds and quarantines a job created twice on a store that
// settles (the second bullet above).
type twiceCheck struct {
	store     *storage.Store
	absent    *evidence.Absence
	artifacts *artifact.Store
	project   defaultProject
	quar      *quarantine
	log       *slog.Logger
}

// createdTwice tells, on a store that settles, whether d, just picked up,
// is a second creation of its id: its artifact exists and is older than
// the record (an earlier job of this id ran), which a create-only write
// accepted over that job's record can leave. A retried or requeued job
// keeps its creation time, so its own artifact never counts. One read per
// pickup, on a store that settles only.
func (q *twiceCheck) createdTwice(ctx context.Context, d *jobDoc) (bool, error) {
	if q.absent.Settle <= 0 {
		return false, nil
	}
	// Read for every tenant: the worker's own check, not a caller's read.
	art, err := q.artifacts.GetForJob(lifecycle.WithTenant(ctx, lifecycle.AllTenants), lifecycle.ActorOrchestration, q.project.of(d.Job), d.JobID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return art.CreatedAt.Before(d.CreatedAt), nil
}

// quarantineTwice moves a job created twice (createdTwice) to quarantine,
// logged and counted, so it is never run again; an operator may restore it.
func (q *twiceCheck) quarantineTwice(ctx context.Context, jobID string) error {
	key, err := layout.JobKey(jobID)
	if err != nil {
		return err
	}
	b, v, err := q.store.Get(ctx, key)
	if err != nil {
		return err
	}
	q.log.ErrorContext(ctx, "jobqueue: job created twice: its artifact is older than its record; quarantined, not run again", "job_id", jobID)
	err = q.quar.poison(ctx, &lifecycle.QuarantinedError{Key: key, Version: string(v), Data: b,
		Reason: "created twice: a create-only write was accepted over a job that had already run"})
	if errors.Is(err, lifecycle.ErrCorrupt) {
		return nil // moved (or changed since, and left to its writer)
	}
	return err
}
