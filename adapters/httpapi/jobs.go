package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// jobRoutes serves /jobs over the job queue, nil when none is served.
type jobRoutes struct {
	queue   *jobqueue.Queue
	cursors *cursors
}

// ops is the queue's operator routes' side (jobqueue.Operator).
func (h *jobRoutes) ops() jobqueue.Operator { return jobqueue.Operator{Queue: h.queue} }

func (h *jobRoutes) table() []route {
	return []route{
		{method: "POST", path: "/jobs", actors: matrixActors(authority.Create, false), body: true, traced: true, h: h.enqueueJob()},
		{method: "POST", path: "/jobs/batch", actors: matrixActors(authority.Create, false), body: true, bodyTimes: batchBodyTimes, traced: true, h: h.enqueueBatch()},
		{method: "GET", path: "/jobs", actors: matrixActors(authority.Read, true), h: h.listJobs()},
		{method: "GET", path: "/stats/jobs/counts", actors: matrixActors(authority.Read, true), h: h.jobCounts()},
		{method: "GET", path: "/stats/jobs/activity", actors: matrixActors(authority.Read, true), h: h.jobActivity()},
		{method: "GET", path: "/jobs/{jobId}", actors: matrixActors(authority.Read, false), h: h.getJob()},
		{method: "GET", path: "/jobs/{jobId}/history", actors: matrixActors(authority.Read, false), h: h.jobHistory()},
		{method: "POST", path: "/jobs/{jobId}/requeue", actors: admin, h: h.requeueJob()},
		{method: "POST", path: "/jobs/{jobId}/cancel", actors: admin, h: h.cancelJob()},
		// A bulk action on a filtered set sits beside the job's own, one
		// path per action.
		{method: "POST", path: "/jobs/requeue", actors: admin, body: true, h: h.bulkJobs(h.ops().RequeueMatching)},
		{method: "POST", path: "/jobs/cancel", actors: admin, body: true, h: h.bulkJobs(h.ops().CancelMatching)},
		{method: "GET", path: "/queues", operator: true, actors: matrixActors(authority.Read, true), h: h.listLanes()},
		{method: "POST", path: "/queues/{queue}/pause", operator: true, actors: admin, h: h.pauseQueue(true)},
		{method: "POST", path: "/queues/{queue}/resume", operator: true, actors: admin, h: h.pauseQueue(false)},
	}
}

func absent(what string) error {
	return apiErr(codes.NotFound, "this worker serves no %s", what)
}

func (h *jobRoutes) enqueueJob() handlerFunc {
	parse := jsonBody(decodeJob)
	return needs(h.queue != nil, "job queue", func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
		n, err := parse(r, actor)
		if err != nil {
			return err
		}
		job, err := h.queue.Enqueue(r.Context(), actor, n)
		if err != nil {
			return jobScoped(err)
		}
		status := http.StatusCreated
		if job.Duplicate {
			status = http.StatusOK // a unique job's holder, "duplicate": true; nothing created
		}
		return writeJSON(w, status, job)
	})
}

// batchBodyTimes is how many times Config.MaxBodyBytes a batch's body may
// be (8 MiB by default): up to 10,000 jobs, most far smaller than the
// 1 MiB one job's payload may be; the queue bounds each job as POST /jobs
// does.
const batchBodyTimes = 8

// enqueueBatch is POST /jobs/batch: the queue's EnqueueMany. A job at
// fault, or a part of the batch that failed after others landed, is
// answered with its index and the jobs that landed (batchFailure).
func (h *jobRoutes) enqueueBatch() handlerFunc {
	return needs(h.queue != nil, "job queue", jsonRoute(http.StatusCreated, jsonBody(decodeBatch),
		func(ctx context.Context, actor lifecycle.Actor, jobs []jobqueue.NewJob) (wire.BatchAnswer, error) {
			landed, err := h.queue.EnqueueMany(ctx, actor, jobs)
			if _, ok := errors.AsType[*lifecycle.BatchError](err); ok {
				return wire.BatchAnswer{}, &batchFailure{err: jobScoped(err), landed: landed}
			}
			return wire.BatchAnswer{Jobs: landed}, jobScoped(err)
		}))
}

// batchFailure is the failure of a batch at one of its jobs, with the
// jobs that landed before it: writeError answers both.
type batchFailure struct {
	err    error
	landed []lifecycle.Job
}

func (e *batchFailure) Error() string { return e.err.Error() }
func (e *batchFailure) Unwrap() error { return e.err }

// jobsQuery reads GET /jobs's filters: ?status=, ?type=, ?agent=.
func jobsQuery(r *http.Request, _ lifecycle.Actor) (jobqueue.JobQuery, error) {
	q := r.URL.Query()
	jq := jobqueue.JobQuery{Status: lifecycle.JobState(q.Get("status")), Type: lifecycle.JobType(q.Get("type")), Agent: q.Get("agent")}
	if jq.Agent != "" {
		if err := storekey.ValidateID("agent", jq.Agent); err != nil {
			return jq, err
		}
	}
	return jq, nil
}

func (h *jobRoutes) listJobs() handlerFunc {
	return needs(h.queue != nil, "job queue", pagedRoute(h.cursors, jobsQuery,
		func(ctx context.Context, actor lifecycle.Actor, jq jobqueue.JobQuery, p pageParams) ([]lifecycle.Job, string, error) {
			jq.Limit, jq.Cursor = p.limit, p.cursor
			page, err := h.queue.ListPage(ctx, actor, jq)
			if err != nil {
				return nil, "", jobScoped(err)
			}
			return page.Jobs, page.Next, nil
		}))
}

func (h *jobRoutes) getJob() handlerFunc {
	return needs(h.queue != nil, "job queue", jsonRoute(http.StatusOK, pathParam("jobId", "job_id"),
		func(ctx context.Context, actor lifecycle.Actor, id string) (lifecycle.Job, error) {
			job, err := h.queue.Get(ctx, actor, id)
			return job, jobScoped(err)
		}))
}

func (h *jobRoutes) requeueJob() handlerFunc {
	return needs(h.queue != nil, "job queue", jsonRoute(http.StatusOK, pathNoBody("jobId", "job_id", "requeue takes no body"),
		func(ctx context.Context, actor lifecycle.Actor, id string) (lifecycle.Job, error) {
			job, err := h.queue.Requeue(ctx, actor, id)
			return job, jobScoped(err)
		}))
}

// pauseQueue is POST /queues/{queue}/pause (paused true) and
// /queues/{queue}/resume: the queue's SetPaused. 204; 400 INVALID_INPUT
// for a name that is no queue's, 409 CONFLICT for a pause during a
// rolling upgrade.
func (h *jobRoutes) pauseQueue(paused bool) handlerFunc {
	return needs(h.queue != nil, "job queue", func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
		if r.ContentLength != 0 {
			return apiErr(codes.InvalidRequest, "a queue's pause or resume takes no body")
		}
		if err := h.ops().SetPaused(r.Context(), actor, r.PathValue("queue"), paused); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// cancelJob is POST /jobs/{jobId}/cancel: the queue's Cancel. 200 with the
// job, CANCELLED (it waited) or RUNNING with cancel_requested_at (its
// worker ends it); 409 JOB_FINISHED or JOB_NOT_CANCELLABLE.
func (h *jobRoutes) cancelJob() handlerFunc {
	return needs(h.queue != nil, "job queue", jsonRoute(http.StatusOK, pathNoBody("jobId", "job_id", "cancel takes no body"),
		func(ctx context.Context, actor lifecycle.Actor, id string) (lifecycle.Job, error) {
			job, err := h.queue.Cancel(ctx, actor, id)
			return job, jobScoped(err)
		}))
}

func (h *jobRoutes) jobHistory() handlerFunc {
	return needs(h.queue != nil, "job queue", jsonRoute(http.StatusOK, pathParam("jobId", "job_id"),
		func(ctx context.Context, actor lifecycle.Actor, id string) (lifecycle.JobHistory, error) {
			hist, err := h.ops().History(ctx, actor, id)
			return hist, jobScoped(err)
		}))
}

// bulkJobs is a bulk action on the jobs a filter selects (POST
// /jobs/requeue, POST /jobs/cancel): one bounded call of act. The cursors in and out are
// those of GET /jobs with the same filters, so a page of the list can be
// acted on from where it starts.
func (h *jobRoutes) bulkJobs(act func(context.Context, lifecycle.Actor, jobqueue.JobQuery) (lifecycle.BulkResult, error)) handlerFunc {
	return needs(h.queue != nil, "job queue", jsonRoute(http.StatusOK, jsonBody(optionalBody[wire.BulkBody]),
		func(ctx context.Context, actor lifecycle.Actor, b wire.BulkBody) (lifecycle.BulkResult, error) {
			if b.Agent != "" {
				if err := storekey.ValidateID("agent", b.Agent); err != nil {
					return lifecycle.BulkResult{}, err
				}
			}
			list := bulkList(b)
			pos, err := h.cursors.open(ctx, list, b.Cursor)
			if err != nil {
				return lifecycle.BulkResult{}, err
			}
			res, err := act(ctx, actor, jobqueue.JobQuery{Status: b.Status, Type: b.Type, Agent: b.Agent, Limit: b.Limit, Cursor: pos})
			if err != nil {
				return res, jobScoped(err)
			}
			if res.Next != "" {
				res.Next, err = h.cursors.seal(ctx, list, res.Next)
			}
			return res, err
		}))
}

// bulkList is the list a bulk body's cursor belongs to: GET /jobs with
// the body's filters (listOf).
func bulkList(b wire.BulkBody) string {
	q := url.Values{}
	for k, v := range map[string]string{"status": string(b.Status), "type": string(b.Type), "agent": b.Agent} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return listOf(&url.URL{Path: "/jobs", RawQuery: q.Encode()})
}

// jobCounts is GET /stats/jobs/counts: the queue's Counts, of the token's
// tenant (statsTenant).
func (h *jobRoutes) jobCounts() handlerFunc {
	return needs(h.queue != nil, "job queue", jsonRoute(http.StatusOK, statsTenant,
		func(ctx context.Context, actor lifecycle.Actor, tenant string) (lifecycle.JobCounts, error) {
			return h.ops().Counts(asTenant(ctx, tenant), actor)
		}))
}

// jobActivity is GET /stats/jobs/activity: the queue's Activity, the last
// hour, of the token's tenant (statsTenant).
func (h *jobRoutes) jobActivity() handlerFunc {
	return needs(h.queue != nil, "job queue", jsonRoute(http.StatusOK, statsTenant,
		func(ctx context.Context, actor lifecycle.Actor, tenant string) (lifecycle.JobActivity, error) {
			return h.ops().Activity(asTenant(ctx, tenant), actor)
		}))
}

// statsTenant reads the job stats' ?tenant=: the one tenant a token of
// every tenant asks for (none: every tenant's); any other token reads its
// own tenant's, whatever it says, as GET /runs (docs/design.md#tenants).
func statsTenant(r *http.Request, _ lifecycle.Actor) (string, error) {
	t := r.URL.Query().Get("tenant")
	if t == "" || lifecycle.TenantOf(r.Context()) != lifecycle.AllTenants {
		return "", nil
	}
	if err := storekey.ValidateID("tenant", t); err != nil {
		return "", err
	}
	return t, nil
}

// asTenant is ctx acting for tenant, when one is named.
func asTenant(ctx context.Context, tenant string) context.Context {
	if tenant == "" {
		return ctx
	}
	return lifecycle.WithTenant(ctx, tenant)
}

func (h *jobRoutes) listLanes() handlerFunc {
	return needs(h.queue != nil, "job queue", jsonRoute(http.StatusOK, noInput,
		func(ctx context.Context, actor lifecycle.Actor, _ struct{}) ([]lifecycle.QueueLane, error) {
			if err := authority.Check(actor, authority.Jobs, authority.Read, authority.Scope{}); err != nil {
				return nil, err
			}
			return h.ops().Lanes(ctx)
		}))
}
