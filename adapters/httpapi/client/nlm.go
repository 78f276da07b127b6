package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/runconveyor/conveyor/lifecycle"
)

// Artifact reads an artifact (GET /artifacts/{artifactId}); an empty
// project is the Worker's default. The token's actor needs read in the
// artifact table of the authority matrix.
func (o Operator) Artifact(ctx context.Context, projectID, artifactID string) (lifecycle.Artifact, error) {
	path := "/artifacts/" + url.PathEscape(artifactID)
	if projectID != "" {
		path += "?" + url.Values{"project": {projectID}}.Encode()
	}
	return get[lifecycle.Artifact](ctx, connOf(o.Client), http.MethodGet, path, nil)
}

// JobArtifact reads a job's result, its artifact (GET
// /jobs/{jobId}/artifact); a job without one yet answers NOT_FOUND.
func (o Operator) JobArtifact(ctx context.Context, jobID string) (lifecycle.Artifact, error) {
	return get[lifecycle.Artifact](ctx, connOf(o.Client), http.MethodGet, "/jobs/"+url.PathEscape(jobID)+"/artifact", nil)
}

// NLMBackend is an NLM backend deployed apart, reached through the HTTP API
// of the Worker that runs it: the NLM package's Ask and Sink take it as
// they take a processor in the same process. Its Client's token acts as
// the orchestration layer.
type NLMBackend struct {
	Client *Client
	// Callback is the callback URL of the requests Accept sends without
	// one: where this side serves POST /nlm/callback. Default none: the
	// backend's own default.
	Callback string
}

// Accept asks the backend for a job (POST /jobs/process, answered 202); a
// job id accepted before is answered as it stands. A request the backend
// refuses as invalid matches lifecycle.ErrInvalidJob.
func (b NLMBackend) Accept(ctx context.Context, req lifecycle.NLMRequest) (lifecycle.NLMJob, error) {
	if req.Callback == "" {
		req.Callback = b.Callback
	}
	job, err := get[lifecycle.NLMJob](ctx, connOf(b.Client), http.MethodPost, "/jobs/process", req)
	if e, ok := errors.AsType[*Error](err); ok && e.Status == http.StatusBadRequest {
		return job, fmt.Errorf("%w: %w", lifecycle.ErrInvalidJob, err)
	}
	return job, err
}

// Get reads the backend's record of a job (GET /nlm/jobs/{jobId}); an
// unknown job matches lifecycle.ErrNotFound.
func (b NLMBackend) Get(ctx context.Context, jobID string) (lifecycle.NLMJob, error) {
	return get[lifecycle.NLMJob](ctx, connOf(b.Client), http.MethodGet, "/nlm/jobs/"+url.PathEscape(jobID), nil)
}

// Artifact reads an artifact the backend wrote (Operator.Artifact).
func (b NLMBackend) Artifact(ctx context.Context, projectID, artifactID string) (lifecycle.Artifact, error) {
	return Operator{Client: b.Client}.Artifact(ctx, projectID, artifactID)
}
