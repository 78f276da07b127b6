package jobqueue

import (
	"context"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// confine answers another tenant's job as missing (docs/design.md#tenants):
// a caller acting for one tenant (lifecycle.WithTenant) learns nothing of
// another's ids. It is checked on the calls a caller makes (Get, History,
// Requeue, Cancel, the pages), never on a worker's claim, which serves
// every tenant's jobs.
func confine(ctx context.Context, j *lifecycle.Job) error {
	if tenancy.Sees(ctx, j.TenantID) {
		return nil
	}
	// The store's own answer for a missing job, word for word.
	key, err := layout.JobKey(j.JobID)
	if err != nil {
		return err
	}
	return &storage.OpError{Op: "get", Key: key, Kind: storage.ErrNotFound}
}

// namedID refuses a job id a caller of a named tenant gives: job ids are
// one namespace for every tenant, so an insert of an id another tenant
// holds would answer JOB_EXISTS and tell the id is taken
// (docs/design.md#tenants). Such a caller's jobs get the queue's ids, or
// a unique job's, whose uniqueness is the tenant's own. A schedule's
// periodic job in a named tenant keeps the slot's id (tenancy.Naming).
func namedID(ctx context.Context, id string) error {
	if t := lifecycle.TenantOf(ctx); id != "" && t != "" && t != lifecycle.AllTenants && !tenancy.NamesIDs(ctx) {
		return badJob("job_id %q: a job of tenant %s takes the queue's id (give unique.key for one of its own)", id, t)
	}
	return nil
}
