package conveyortest_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
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
