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
