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

// MaxBulk is the most jobs one call of a bulk action (RequeueMatching,
// CancelMatching) acts on, and its default: the call's reads and writes stay bounded,
// and a caller goes on from the result's Next.
const MaxBulk = 100

// jobAction is one job's move by an actor (requeue, cancel).
type jobAction func(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.Job, error)

// bulk makes the move on event of every job of one page of jq that the
// job machine has the move from: jobs in other states are passed over,
// not failed (a filter without a state selects them too). The actor is
// checked first, by the matrix and by the machine, so a refusal writes
// and reads nothing.
func bulk(ctx context.Context, actor lifecycle.Actor, reads *reader, jq JobQuery, event lifecycle.Event, act jobAction) (lifecycle.BulkResult, error) {
	return bulkOn(ctx, actor, reads, jq, machine.JobMachine(), event, act)
}

// bulkCancel is CancelMatching: bulk on the general machine's cancel,
// whose moves from QUEUED and RETRY_BACKOFF are the admin's and whose
// move from RUNNING is asked for by whoever may make those (Cancel). A
// job of an NLM type in one of those states is not passed over: Cancel
// refuses it (JOB_NOT_CANCELLABLE), and the result says so.
func bulkCancel(ctx context.Context, actor lifecycle.Actor, reads *reader, jq JobQuery, act jobAction) (lifecycle.BulkResult, error) {
	return bulkOn(ctx, actor, reads, jq, machine.GeneralJobMachine(), machine.EventCancel, act)
}

// bulkOn is bulk on machine m.
func bulkOn(ctx context.Context, actor lifecycle.Actor, reads *reader, jq JobQuery, m *machine.Machine[lifecycle.JobState, *lifecycle.Job], event lifecycle.Event, act jobAction) (lifecycle.BulkResult, error) {
	if jq.Limit == 0 {
		jq.Limit = MaxBulk
	}
	if jq.Limit < 0 || jq.Limit > MaxBulk {
		return lifecycle.BulkResult{}, &paging.Error{Field: "limit", Reason: fmt.Sprintf("%d is not within 1 and %d", jq.Limit, MaxBulk)}
	}
	if err := authority.Check(actor, authority.Jobs, authority.UpdateStatus, authority.Scope{}); err != nil {
		return lifecycle.BulkResult{}, err
	}
	from, err := movesOn(m, event, actor)
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

// movesOn returns the states machine jm moves from on event, and
// refuses an actor none of those moves lists. A RUNNING job's cancel is
// asked for by whoever may cancel a QUEUED one (Cancel), so it is in
// the states of an actor that may.
func movesOn(jm *machine.Machine[lifecycle.JobState, *lifecycle.Job], event lifecycle.Event, actor lifecycle.Actor) ([]lifecycle.JobState, error) {
	var from []lifecycle.JobState
	var refusal error
	for _, t := range jm.Transitions() {
		if t.Event != event || event == machine.EventCancel && t.From == lifecycle.JobRunning {
			continue // a RUNNING job's cancel is its worker's move, asked for below
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
	if event == machine.EventCancel && slices.Contains(from, lifecycle.JobQueued) && !slices.Contains(from, lifecycle.JobRunning) {
		from = append(from, lifecycle.JobRunning)
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
