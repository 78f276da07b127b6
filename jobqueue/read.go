package jobqueue

import (
	"context"
	"errors"
	"iter"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// ownJob is the "own job" of the NLM backend (docs/spec.md#authority-matrix): the job the
// orchestration layer has handed to it, which is the job in NOTEBOOKLM_CALL.
func ownJob(actor lifecycle.Actor, j *lifecycle.Job) bool {
	return actor == lifecycle.ActorNLMBackend && j.Status == lifecycle.JobNotebookLMCall
}

// reader is the queue's reads of its jobs: one job, every job or a page
// of them, and the wait for one to finish.
type reader struct {
	store *storage.Store
	// watch is the store as given (Config.Store), whose Watch, if it has
	// one, wakes a Wait.
	watch *storage.Store
	clock clock.Clock
	jobs  *jobStore
	quar  *quarantine
	waits *waitSet
}

// get is Queue.Get.
func (q *reader) get(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.Job, error) {
	if authority.Lookup(actor, authority.Jobs, authority.Read) == authority.Denied {
		return lifecycle.Job{}, authority.Check(actor, authority.Jobs, authority.Read, authority.Scope{})
	}
	d, _, err := q.jobs.read(ctx, jobID)
	if err == nil {
		err = confine(ctx, &d.Job)
	}
	if err != nil {
		return lifecycle.Job{}, q.quar.quarantinedOr(ctx, jobID, err)
	}
	if err := authority.Check(actor, authority.Jobs, authority.Read, authority.Scope{Own: ownJob(actor, &d.Job)}); err != nil {
		return lifecycle.Job{}, err
	}
	return d.Job, nil
}

// list is Queue.List.
func (q *reader) list(ctx context.Context, actor lifecycle.Actor) iter.Seq2[lifecycle.Job, error] {
	return func(yield func(lifecycle.Job, error) bool) {
		if err := authority.Check(actor, authority.Jobs, authority.Read, authority.Scope{}); err != nil {
			yield(lifecycle.Job{}, err)
			return
		}
		for d, err := range q.docs(ctx) {
			if err == nil && !tenancy.Sees(ctx, d.TenantID) {
				continue // another tenant's, as ListPage and Get hide it
			}
			if !yield(d.Job, err) || err != nil {
				return
			}
		}
	}
}

func (q *reader) docs(ctx context.Context) iter.Seq2[jobDoc, error] {
	return func(yield func(jobDoc, error) bool) {
		for key, err := range q.store.List(ctx, layout.JobsPrefix) {
			if err != nil {
				yield(jobDoc{}, err)
				return
			}
			id, ok := layout.JobIDFromKey(key)
			if !ok {
				continue
			}
			d, _, err := q.jobs.read(ctx, id)
			if errors.Is(err, storage.ErrNotFound) {
				continue
			}
			if !yield(d, err) || err != nil {
				return
			}
		}
	}
}
