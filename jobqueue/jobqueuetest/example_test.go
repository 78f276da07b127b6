package jobqueuetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/jobqueue/jobqueuetest"
	"github.com/runconveyor/conveyor/lifecycle"
)

// A handler whose upstream hangs on the first call is timed out at the
// queue's 120 s and retried after the 15 s backoff: 2m15s of fake time,
// no real waiting. Run returns the job and its artifact.
func ExampleRun() {
	t := exampleT() // in a test: the test's *testing.T
	calls := 0
	h := jobqueue.Handlers{CallNotebookLM: func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (jobqueue.Output, error) {
		if calls++; calls == 1 {
			return jobqueue.Output{}, jobqueuetest.Hang(ctx) // the upstream never answers
		}
		return jobqueue.Output{Content: json.RawMessage(`{"title":"t","body":"b","entity_map":{},"word_count":1}`)}, nil
	}}
	job, art := jobqueuetest.Run(t, h, jobqueue.NewJob{RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a"})
	fmt.Println(job.Status, "on attempt", job.Attempt, "after", job.UpdatedAt.Sub(job.CreatedAt))
	fmt.Println(art.Type, art.Finalized)
	// Output:
	// COMPLETE on attempt 2 after 2m15s
	// BRIEF true
}

// RequireJob checks a job your own code put in a Queue.
func ExampleRequireJob() {
	t := exampleT()
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New()})
	q.Enqueue(context.Background(), lifecycle.ActorGateway, jobqueue.NewJob{
		JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobResearch, AgentSlug: "agent-a",
	})
	job := jobqueuetest.RequireJob(t, q, "job-1", lifecycle.JobQueued)
	fmt.Println(job.JobID, job.Status, job.MaxAttempts)
	// Output: job-1 QUEUED 3
}

// exampleT stands in for a test's *testing.T in these examples: it panics
// where a test would fail.
func exampleT() testing.TB { return panicTB{} }

type panicTB struct{ testing.TB }

func (panicTB) Helper()                           {}
func (panicTB) Cleanup(func())                    {}
func (panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
