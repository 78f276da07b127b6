package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

func ExampleQueue() {
	ctx := context.Background()
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New()})

	// The gateway enqueues; the queue validates and admits (PENDING → QUEUED).
	job, _ := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{
		JobID: "job-1", RunID: "run_2026-02-24_abc123", JobType: lifecycle.JobBrief, AgentSlug: "architect-guardian",
	})
	fmt.Println(job.Status)

	// A worker claims it (QUEUED → CONTEXT_ASSEMBLY, attempt 1) and runs it.
	c, _ := q.Claim(ctx, "worker-1")
	fmt.Println(c.Job().Status, c.Job().Attempt)
	done, _ := c.Run(ctx, jobqueue.Handlers{
		CallNotebookLM: func(ctx context.Context, job lifecycle.Job, snapshot json.RawMessage) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"Brief","body":"Short","entity_map":{},"word_count":1}`)}, nil
		},
	})
	fmt.Println(done.Status, done.ArtifactID == artifact.IDForJob("job-1"))

	// The frontend may read jobs, never requeue them.
	_, err := q.Requeue(ctx, lifecycle.ActorFrontend, "job-1")
	fmt.Println(err)
	// Output:
	// QUEUED
	// CONTEXT_ASSEMBLY 1
	// COMPLETE true
	// FORBIDDEN: actor "frontend" may not update_status jobs (authority matrix: denied)
}

func ExampleQueue_InsertMany() {
	ctx := context.Background()
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New()})

	// Three jobs in one commit: memstore (as SQLite) writes all or none.
	batch := []jobqueue.NewJob{
		{JobID: "brief-1", JobType: lifecycle.JobBrief, AgentSlug: "writer"},
		{JobID: "brief-2", JobType: lifecycle.JobBrief, AgentSlug: "writer"},
		{JobID: "research-1", JobType: lifecycle.JobResearch},
	}
	jobs, err := q.InsertMany(ctx, batch)
	fmt.Println(len(jobs), err, jobs[2].AgentSlug)

	// Sent again, the batch fails on its first job, and writes nothing.
	_, err = q.InsertMany(ctx, batch)
	var be *lifecycle.BatchError
	fmt.Println(errors.As(err, &be), be.Index, errors.Is(err, lifecycle.ErrJobExists))
	// Output:
	// 3 <nil> _type.RESEARCH
	// true 0 true
}
