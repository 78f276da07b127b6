package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/paging"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// JobQuery selects a page of jobs for ListPage: filters (empty: any) and
// the page.
type JobQuery struct {
	Status lifecycle.JobState
	Type   lifecycle.JobType
	Agent  string
	// Limit is the most jobs in the page: 0 means 50,
	// more than 500 is refused.
	Limit int
	// Cursor is the Next of the page before; "" for the first page.
	Cursor string
}

// JobPage is a page of jobs, in job id order.
type JobPage struct {
	Jobs []lifecycle.Job
	// Next is the cursor of the next page, "" on the last page.
	Next string
}

// pageBudget is how many job records one page reads at most, whatever its
// filters: a page of a rare filter may come back short (even empty) with
// a Next, and costs a bounded number of reads.
func pageBudget(limit int) int { return max(4*limit, 200) }

// listPage is Queue.ListPage.
func (q *reader) listPage(ctx context.Context, actor lifecycle.Actor, jq JobQuery) (JobPage, error) {
	if err := authority.Check(actor, authority.Jobs, authority.Read, authority.Scope{}); err != nil {
		return JobPage{}, err
	}
	limit, err := paging.Limit(jq.Limit)
	if err != nil {
		return JobPage{}, err
	}
	if jq.Status != "" && !slices.Contains(machine.JobStates(), jq.Status) {
		return JobPage{}, &paging.Error{Field: "status", Reason: fmt.Sprintf("%q is not a job state", jq.Status)}
	}
	if jq.Agent != "" {
		if err := storekey.ValidateID("agent slug", jq.Agent); err != nil {
			return JobPage{}, err
		}
	}
	after, err := paging.Cursor(jq.Cursor, func(e string) bool { _, ok := layout.JobIDFromKey(layout.JobsPrefix + e); return ok })
	if err != nil {
		return JobPage{}, err
	}
	jobs, next, err := paging.Read(ctx, q.store, []string{layout.JobsPrefix}, after, limit, pageBudget(limit),
		func(ctx context.Context, _ int, entry string) (lifecycle.Job, bool, error) {
			id, ok := layout.JobIDFromKey(layout.JobsPrefix + entry)
			if !ok {
				return lifecycle.Job{}, false, nil
			}
			d, _, err := q.jobs.read(ctx, id)
			if errors.Is(err, storage.ErrNotFound) || errors.Is(err, errNewerRecord) {
				return lifecycle.Job{}, false, nil // gone, poison (quarantined), or a later release's
			}
			if err != nil {
				return lifecycle.Job{}, false, err
			}
			j := d.Job
			ok = tenancy.Sees(ctx, j.TenantID) && (jq.Status == "" || j.Status == jq.Status) && (jq.Type == "" || j.JobType == jq.Type) &&
				(jq.Agent == "" || j.AgentSlug == jq.Agent)
			return j, ok, nil
		})
	if err != nil {
		return JobPage{}, err
	}
	return JobPage{Jobs: jobs, Next: next}, nil
}
