package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/paging"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// MaxBulk is the most jobs one call of a bulk action (RequeueMatching)
// acts on, and its default: the call's reads and writes stay bounded,
// and a caller goes on from the result's Next.
const MaxBulk = 100

// jobAction is one job's move by an actor (requeue; cancel would be one).
type jobAction func(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.Job, error)

// bulk makes the move on event of every job of one page of jq that the
// job machine has the move from: jobs in other states are passed over,
// not failed (a filter without a state selects them too). The actor is
// checked first, by the matrix and by the machine, so a refusal writes
// and reads nothing.
func bulk(ctx context.Context, actor lifecycle.Actor, reads *reader, jq JobQuery, event lifecycle.Event, act jobAction) (lifecycle.BulkResult, error) {
	if jq.Limit == 0 {
		jq.Limit = MaxBulk
	}
	if jq.Limit < 0 || jq.Limit > MaxBulk {
		return lifecycle.BulkResult{}, &paging.Error{Field: "limit", Reason: fmt.Sprintf("%d is not within 1 and %d", jq.Limit, MaxBulk)}
	}
	if err := authority.Check(actor, authority.Jobs, authority.UpdateStatus, authority.Scope{}); err != nil {
		return lifecycle.BulkResult{}, err
	}
	from, err := movesOn(event, actor)
	if err != nil {
		return lifecycle.BulkResult{}, err
	}
	page, err := reads.listPage(ctx, actor, jq)
	if err != nil {
		return lifecycle.BulkResult{}, err
	}
	res := lifecycle.BulkResult{JobIDs: []string{}, Failed: []lifecycle.BulkFailure{}, Next: page.Next}
	for _, j := range page.Jobs {
		if !slices.Contains(from, j.Status) {
			continue
		}
		if _, err := act(ctx, actor, j.JobID); err != nil {
			if ctx.Err() != nil {
				return res, err // the caller is gone: what was done is in res
			}
			res.Failed = append(res.Failed, lifecycle.BulkFailure{JobID: j.JobID, Code: bulkCode(err), Message: err.Error()})
			continue
		}
		res.JobIDs = append(res.JobIDs, j.JobID)
	}
	res.Count = len(res.JobIDs)
	return res, nil
}

// movesOn returns the states the job machine moves from on event, and
// refuses an actor none of those moves lists.
func movesOn(event lifecycle.Event, actor lifecycle.Actor) ([]lifecycle.JobState, error) {
	jm := machine.JobMachine()
	var from []lifecycle.JobState
	var refusal error
	for _, t := range jm.Transitions() {
		if t.Event != event {
			continue
		}
		if err := jm.CheckActor(t.From, t.To, actor); err != nil {
			refusal = err
			continue
		}
		from = append(from, t.From)
	}
	if len(from) == 0 && refusal != nil {
		return nil, refusal
	}
	return from, nil
}

// bulkCode is the API's code of one job's failure.
func bulkCode(err error) string {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return codes.JobNotFound
	case errors.Is(err, storage.ErrPreconditionFailed):
		return codes.Conflict
	}
	return lifecycle.ErrorCode(err)
}
