package httpapi

import (
	"context"
	"net/http"
	"slices"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
)

// backendRoutes serves the NLM backend's side over HTTP (POST
// /jobs/process, GET /nlm/jobs/{jobId}), so an orchestration layer
// deployed apart can ask it, and the artifact reads the matrix grants.
type backendRoutes struct {
	proc      *nlm.Processor
	queue     *jobqueue.Queue
	artifacts *artifact.Store
}

// processActors may ask the NLM backend for a job: the orchestration
// layer, which runs the queue's NOTEBOOKLM_CALL, and the admin. The
// request names a callback URL the backend will post to, so no other
// actor may.
var processActors = []lifecycle.Actor{lifecycle.ActorOrchestration, lifecycle.ActorAdmin}

// nlmReaders read the backend's job records: the askers and the backend.
var nlmReaders = []lifecycle.Actor{lifecycle.ActorOrchestration, lifecycle.ActorAdmin, lifecycle.ActorNLMBackend}

func (h *backendRoutes) table() []route {
	artifactReaders := tableActors(authority.Artifacts, authority.Read)
	// A job's artifact: who may read the job and the artifact both.
	jobArtifactReaders := slices.DeleteFunc(matrixActors(authority.Read, false), func(a lifecycle.Actor) bool {
		return !slices.Contains(artifactReaders, a)
	})
	return []route{
		// The NLM backend's side is the Worker's machinery, as its
		// callback is: an operator's (docs/design.md#tenants).
		{method: "POST", path: "/jobs/process", operator: true, actors: processActors, body: true, traced: true, h: h.process()},
		{method: "GET", path: "/nlm/jobs/{jobId}", operator: true, actors: nlmReaders, h: h.nlmJob()},
		{method: "GET", path: "/artifacts/{artifactId}", actors: artifactReaders, h: h.artifact()},
		{method: "GET", path: "/jobs/{jobId}/artifact", actors: jobArtifactReaders, h: h.jobArtifact()},
	}
}

// tableActors lists the actors a cell of resource r's table allows op
// without qualification.
func tableActors(r authority.Resource, op authority.Operation) []lifecycle.Actor {
	var out []lifecycle.Actor
	for _, a := range authority.Actors() {
		if authority.Lookup(a, r, op) == authority.Allowed {
			out = append(out, a)
		}
	}
	return out
}

// process is POST /jobs/process: the spec's entry to the NLM backend,
// answered 202 with the job as accepted (a job id accepted before is
// answered as it stands). The processor's Run takes it from there and
// posts the request's callback.
func (h *backendRoutes) process() handlerFunc {
	return needs(h.proc != nil, "NLM processor", jsonRoute(http.StatusAccepted, jsonBody(requiredBody[lifecycle.NLMRequest]),
		func(ctx context.Context, _ lifecycle.Actor, req lifecycle.NLMRequest) (lifecycle.NLMJob, error) {
			job, err := h.proc.Accept(ctx, req)
			return job, jobScoped(err)
		}))
}

func (h *backendRoutes) nlmJob() handlerFunc {
	return needs(h.proc != nil, "NLM processor", jsonRoute(http.StatusOK, pathParam("jobId", "job_id"),
		func(ctx context.Context, _ lifecycle.Actor, id string) (lifecycle.NLMJob, error) {
			job, err := h.proc.Get(ctx, id)
			return job, jobScoped(err)
		}))
}

// artifact is GET /artifacts/{artifactId}?project=: the project defaults
// to the store's.
func (h *backendRoutes) artifact() handlerFunc {
	return needs(h.artifacts != nil, "artifact store", jsonRoute(http.StatusOK, artifactPath,
		func(ctx context.Context, actor lifecycle.Actor, ref [2]string) (lifecycle.Artifact, error) {
			return h.artifacts.Get(ctx, actor, ref[0], ref[1])
		}))
}

func artifactPath(r *http.Request, _ lifecycle.Actor) ([2]string, error) {
	id, err := pathID(r, "artifactId", "artifact_id")
	if err != nil {
		return [2]string{}, err
	}
	project := r.URL.Query().Get("project")
	if project != "" {
		if err := storekey.ValidateID("project", project); err != nil {
			return [2]string{}, err
		}
	}
	return [2]string{project, id}, nil
}

// jobArtifact is GET /jobs/{jobId}/artifact: the job's result, read as
// the caller (the job's read, then the artifact's).
func (h *backendRoutes) jobArtifact() handlerFunc {
	return needs(h.queue != nil && h.artifacts != nil, "job queue", jsonRoute(http.StatusOK, pathParam("jobId", "job_id"),
		func(ctx context.Context, actor lifecycle.Actor, id string) (lifecycle.Artifact, error) {
			job, err := h.queue.Get(ctx, actor, id)
			if err != nil {
				return lifecycle.Artifact{}, jobScoped(err)
			}
			if job.ArtifactID == "" {
				return lifecycle.Artifact{}, apiErr(codes.NotFound, "job %s has no artifact (it is %s)", id, job.Status)
			}
			return h.artifacts.Get(ctx, actor, job.ProjectID, job.ArtifactID)
		}))
}
