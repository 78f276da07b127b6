package jobqueue

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The calls of a Go program that embeds the queue. The methods that take
// a lifecycle.Actor (Enqueue, Get, List, Requeue) check the authority
// matrix for it: they are what a surface such as the HTTP API calls on a
// caller's behalf. A program that embeds the queue is the system itself,
// and these methods act as it, without an actor to pass: as the
// orchestration layer, which the matrix lets create and read jobs and read
// artifacts, and, for Retry, as the admin, the one actor the job machine
// lets requeue (docs/design.md#jobs).
const (
	// systemActor is the actor Insert, InsertJob, InsertMany, Job and
	// Result act as.
	systemActor = lifecycle.ActorOrchestration
	// operatorActor is the actor Retry acts as.
	operatorActor = lifecycle.ActorAdmin
)

// Insert enqueues a stand-alone job of type t (no run, no agent: it runs
// in its type's lane) whose payload is args encoded as JSON, as
// the system (the orchestration layer). args may be a json.RawMessage, used as it is,
// or nil for no payload. A Typed handler of the same Args decodes it.
func (q *Queue) Insert(ctx context.Context, t lifecycle.JobType, args any) (lifecycle.Job, error) {
	var payload json.RawMessage
	switch a := args.(type) {
	case nil:
	case json.RawMessage:
		payload = a
	default:
		b, err := json.Marshal(args)
		if err != nil {
			return lifecycle.Job{}, fmt.Errorf("%w: payload of a %s job: %w", lifecycle.ErrInvalidJob, t, err)
		}
		payload = b
	}
	return q.InsertJob(ctx, NewJob{JobType: t, Payload: payload})
}

// InsertJob is Enqueue as the system (the orchestration layer): for a job with a run,
// an agent, an id or a callback of its own.
func (q *Queue) InsertJob(ctx context.Context, n NewJob) (lifecycle.Job, error) {
	return q.Enqueue(ctx, systemActor, n)
}

// Job is Get as the system (the orchestration layer).
func (q *Queue) Job(ctx context.Context, jobID string) (lifecycle.Job, error) {
	return q.Get(ctx, systemActor, jobID)
}

// Retry is Requeue as the operator (the admin): a FAILED or DEAD job
// starts over with a fresh set of attempts.
func (q *Queue) Retry(ctx context.Context, jobID string) (lifecycle.Job, error) {
	return q.Requeue(ctx, operatorActor, jobID)
}

// Result reads the artifact of job jobID, the lifecycle.JobOutput of its handler, as
// the system (the orchestration layer), from the job's own project (its project_id,
// else Config.Project). A job that has not completed has none: the error
// matches storage.ErrNotFound.
func (q *Queue) Result(ctx context.Context, jobID string) (artifact.Artifact, error) {
	job, err := q.Job(ctx, jobID)
	if err != nil {
		return artifact.Artifact{}, err
	}
	return q.artifacts.GetForJob(ctx, systemActor, q.project.of(job), jobID)
}

// InsertMany is EnqueueMany as the system (the orchestration layer): at
// most 10,000 jobs, 500 a commit on a store that commits several writes
// at once, else one at a time; on a failure the jobs returned landed and
// the rest did not (EnqueueMany says how to tell).
func (q *Queue) InsertMany(ctx context.Context, jobs []NewJob) ([]lifecycle.Job, error) {
	return q.EnqueueMany(ctx, systemActor, jobs)
}

// ResultAs reads the result of job jobID as Result does and decodes its
// content, JSON, into T: the value a Typed handler of the job's type
// returned, read back as its Go type. A job that has not completed has no
// result: the error matches storage.ErrNotFound. Content that does not
// decode into T gives an error naming the job, T and encoding/json's
// error, which it wraps.
func ResultAs[T any](ctx context.Context, q *Queue, jobID string) (T, error) {
	var v T
	art, err := q.Result(ctx, jobID)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(art.Content, &v); err != nil {
		return v, fmt.Errorf("jobqueue: result of job %s does not decode into %T: %w", jobID, v, err)
	}
	return v, nil
}
