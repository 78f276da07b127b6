package conveyortest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/conveyortest"
)

// A handler whose upstream hangs on the first call is timed out at the
// queue's 120 s and retried after the 15 s backoff: 2m15s of fake time,
// no real waiting. RunJob returns the job and its artifact.
func ExampleRunJob() {
	t := exampleT() // in a test: the test's *testing.T
	calls := 0
	h := jobqueue.Handlers{CallNotebookLM: func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
		if calls++; calls == 1 {
			return lifecycle.JobOutput{}, conveyortest.Hang(ctx) // the upstream never answers
		}
		return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"t","body":"b","entity_map":{},"word_count":1}`)}, nil
	}}
	job, art := conveyortest.RunJob(t, h, jobqueue.NewJob{RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a"})
	fmt.Println(job.Status, "on attempt", job.Attempt, "after", job.UpdatedAt.Sub(job.CreatedAt))
	fmt.Println(art.Type, art.Finalized)
	// Output:
	// COMPLETE on attempt 2 after 2m15s
	// BRIEF true
}

// A job type of your own, with a Typed handler: its payload decodes into
// the handler's argument and its result becomes the job's artifact. The
// first attempt hangs, so it is timed out at 120 s and retried after 15 s.
func ExampleRunJob_typed() {
	t := exampleT()
	type greet struct {
		Name string `json:"name"`
	}
	calls := 0
	h := jobqueue.Typed(func(ctx context.Context, g greet) (string, error) {
		if calls++; calls == 1 {
			return "", conveyortest.Hang(ctx)
		}
		return "hello, " + g.Name, nil
	})
	types := func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{"GREET": {Handler: h}}
	}
	job, art := conveyortest.RunJob(t, nil, jobqueue.NewJob{JobType: "GREET", Payload: []byte(`{"name":"Ada"}`)}, types)
	fmt.Println(job.Status, "on attempt", job.Attempt, "after", job.UpdatedAt.Sub(job.CreatedAt))
	fmt.Println(art.Type, string(art.Content))
	// Output:
	// COMPLETE on attempt 2 after 2m15s
	// GREET "hello, Ada"
}

// RequireJob checks a job your own code put in a Queue.
func ExampleRequireJob() {
	t := exampleT()
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New()})
	q.Enqueue(context.Background(), lifecycle.ActorGateway, jobqueue.NewJob{
		JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobResearch, AgentSlug: "agent-a",
	})
	job := conveyortest.RequireJob(t, q, "job-1", lifecycle.JobQueued)
	fmt.Println(job.JobID, job.Status, job.MaxAttempts)
	// Output: job-1 QUEUED 3
}

// A paused queue starts nothing until resumed, on a fake clock: your own
// Queue, paused as the admin; a claim finds nothing however far the clock
// moves, and after the resume the job runs.
func ExampleRequireJob_pausedQueue() {
	t := exampleT()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	greet := jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: json.RawMessage(`"hi"`)}, nil
	})
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New(), Clock: clk,
		Types: map[lifecycle.JobType]jobqueue.TypeConfig{"GREET": {Handler: greet, Queue: "mail"}}})
	_ = (jobqueue.Operator{Queue: q}).SetPaused(ctx, lifecycle.ActorAdmin, "mail", true)
	q.InsertJob(ctx, jobqueue.NewJob{JobID: "job-1", JobType: "GREET"})
	clk.Advance(time.Hour)
	c, _ := q.Claim(ctx, "w1")
	fmt.Println("claimed while paused:", c != nil, conveyortest.RequireJob(t, q, "job-1", lifecycle.JobQueued).Status)
	_ = (jobqueue.Operator{Queue: q}).SetPaused(ctx, lifecycle.ActorAdmin, "mail", false)
	c, _ = q.Claim(ctx, "w1")
	job, _ := c.Run(ctx, jobqueue.Handlers{})
	fmt.Println("after the resume:", job.Status)
	// Output:
	// claimed while paused: false QUEUED
	// after the resume: COMPLETE
}
