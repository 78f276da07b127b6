package nlm

import (
	"context"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Backend is the NLM backend a run's steps ask (Ask) and whose callbacks
// Sink checks: a *Processor in this process, or one deployed apart and
// reached over the HTTP API (the Go client's NLMBackend, which posts to
// its POST /jobs/process).
type Backend interface {
	// Accept registers the request as a job, answered at once (the spec's
	// 202); accepting a job id again returns the job as it stands.
	Accept(ctx context.Context, req lifecycle.NLMRequest) (lifecycle.NLMJob, error)
	// Get reads the backend's record of a job; an unknown job matches
	// storage.ErrNotFound (lifecycle.ErrNotFound).
	Get(ctx context.Context, jobID string) (lifecycle.NLMJob, error)
	// Artifact reads an artifact the backend wrote, as the orchestration
	// layer that asked for it; an empty project is the backend's default.
	Artifact(ctx context.Context, projectID, artifactID string) (lifecycle.Artifact, error)
}

var _ Backend = (*Processor)(nil)

// Artifact reads an artifact of this processor's store as the
// orchestration layer: what Ask's second step hands on. An empty project
// is Config.Project.
func (p *Processor) Artifact(ctx context.Context, projectID, artifactID string) (artifact.Artifact, error) {
	return p.cfg.Artifacts.Get(ctx, lifecycle.ActorOrchestration, orDefault(projectID, p.cfg.Project), artifactID)
}

// Artifacts returns the artifact store the processor writes to.
func (p *Processor) Artifacts() *artifact.Store { return p.cfg.Artifacts }
