package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Operator calls the routes an operator's dashboard reads and acts
// through, beyond the Client's own: a job's history, the queue's lanes,
// and actions on a filtered set of jobs. It is a value over a Client:
// Operator{Client: c}.
type Operator struct {
	Client *Client
	// Tenant is the one tenant whose job counts and activity a token of
	// every tenant (actor@*) reads; "" reads every tenant's. A token of
	// one tenant reads its own, whatever Tenant says.
	Tenant string
}

// stats reads the job stats at path into out, for the Operator's tenant.
func (o Operator) stats(ctx context.Context, path string, out any) error {
	var q url.Values
	if o.Tenant != "" {
		q = url.Values{"tenant": {o.Tenant}}
	}
	return connOf(o.Client).call(ctx, http.MethodGet, path, q, nil, out)
}

// RunInput reads the input a run was submitted with, which every step is
// given (GET /runs/{runId}/input); nil for a run submitted without one.
func (o Operator) RunInput(ctx context.Context, runID string) (json.RawMessage, error) {
	a, err := get[wire.RunInputAnswer](ctx, connOf(o.Client), http.MethodGet, runPath(runID, "/input"), nil)
	if err != nil || string(a.Input) == "null" {
		return nil, err
	}
	return a.Input, nil
}

// JobHistory reads a job with its moves from the audit log and its
// attempts, each with its error and duration (GET /jobs/{jobId}/history).
func (o Operator) JobHistory(ctx context.Context, jobID string) (lifecycle.JobHistory, error) {
	return get[lifecycle.JobHistory](ctx, connOf(o.Client), http.MethodGet, "/jobs/"+url.PathEscape(jobID)+"/history", nil)
}

// RequeueJobs is the admin's requeue of the FAILED and DEAD jobs q
// selects (POST /jobs/requeue: q's Status, Type and Agent, as Jobs takes
// them): one call acts on at most q.Limit jobs (0: 100, at most 100) and
// answers the cursor of the rest; with q.All it goes on until the set is
// done and answers every job requeued and every failure, with Next "".
// On an error the result holds what the calls before it did.
func (o Operator) RequeueJobs(ctx context.Context, q Query) (lifecycle.BulkResult, error) {
	return o.bulk(ctx, "/jobs/requeue", q)
}

// CancelJobs is the admin's cancel of the jobs q selects (POST
// /jobs/cancel, q's filters as RequeueJobs takes them), each as CancelJob
// does it: QUEUED and RETRY_BACKOFF jobs end CANCELLED, a RUNNING one has
// its cancel asked for; finished jobs are passed over, and a job of an
// NLM type is answered in Failed with JOB_NOT_CANCELLABLE. Pages and
// q.All as for RequeueJobs.
func (o Operator) CancelJobs(ctx context.Context, q Query) (lifecycle.BulkResult, error) {
	return o.bulk(ctx, "/jobs/cancel", q)
}

// bulk calls the bulk action at path with q's filters, page by page when
// q.All says so.
func (o Operator) bulk(ctx context.Context, path string, q Query) (lifecycle.BulkResult, error) {
	body := wire.BulkBody{Status: lifecycle.JobState(q.Status), Type: lifecycle.JobType(q.Type), Agent: q.Agent, Limit: q.Limit, Cursor: q.Cursor}
	all := lifecycle.BulkResult{JobIDs: []string{}, Failed: []lifecycle.BulkFailure{}}
	for {
		res, err := get[lifecycle.BulkResult](ctx, connOf(o.Client), http.MethodPost, path, body)
		if err != nil {
			return all, err
		}
		if !q.All {
			return res, nil
		}
		all.JobIDs = append(all.JobIDs, res.JobIDs...)
		all.Failed = append(all.Failed, res.Failed...)
		all.Count = len(all.JobIDs)
		if res.Next == "" {
			return all, nil
		}
		body.Cursor = res.Next
	}
}

// Queues lists the queue's lanes with their depth and whether a job of
// each runs now (GET /queues).
func (o Operator) Queues(ctx context.Context) ([]lifecycle.QueueLane, error) {
	return get[[]lifecycle.QueueLane](ctx, connOf(o.Client), http.MethodGet, "/queues", nil)
}

// CancelJob is the admin's cancel of a job of a type of the user's (POST
// /jobs/{jobId}/cancel): a QUEUED or RETRY_BACKOFF job comes back
// CANCELLED, a RUNNING one still RUNNING with its cancel asked for (its
// worker ends it CANCELLED). A finished job's error matches
// lifecycle.ErrJobFinished, a job of an NLM type's
// lifecycle.ErrJobNotCancellable.
func (o Operator) CancelJob(ctx context.Context, jobID string) (lifecycle.Job, error) {
	return get[lifecycle.Job](ctx, connOf(o.Client), http.MethodPost, "/jobs/"+url.PathEscape(jobID)+"/cancel", nil)
}

// SetPaused is the admin's pause of a named queue (POST
// /queues/{queue}/pause), or with paused false its resume (POST
// /queues/{queue}/resume): while paused no job of the queue starts, on
// any Worker sharing the store; jobs running when it was paused finish.
// Queues says which lanes' queues are paused. A name that is no queue's
// is answered INVALID_INPUT; a pause while the server's queue keeps to
// what the previous release reads (a rolling upgrade), CONFLICT.
func (o Operator) SetPaused(ctx context.Context, queue string, paused bool) error {
	action := "/resume"
	if paused {
		action = "/pause"
	}
	return connOf(o.Client).call(ctx, http.MethodPost, "/queues/"+url.PathEscape(queue)+action, nil, nil, nil)
}

// JobCounts counts the jobs in each state per job type and agent (GET
// /stats/jobs/counts): the jobs in flight read where they are, the others from
// the audit log's rollups, so the counts match the list after every move
// without reading the jobs that finished. Partial says the Worker read
// its bound first: call again.
func (o Operator) JobCounts(ctx context.Context) (lifecycle.JobCounts, error) {
	var c lifecycle.JobCounts
	err := o.stats(ctx, "/stats/jobs/counts", &c)
	return c, err
}

// JobActivity reads the queue's last hour minute by minute (GET
// /stats/jobs/activity): jobs completed, attempts failed, jobs cancelled, and
// the run time and wait of the attempts that ended.
func (o Operator) JobActivity(ctx context.Context) (lifecycle.JobActivity, error) {
	var a lifecycle.JobActivity
	err := o.stats(ctx, "/stats/jobs/activity", &a)
	return a, err
}
