package jobqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// Testing a handler with the fake clock: time moves only when the test
// says, so a step timeout and a retry backoff take no real time. Wait on
// WaitForTimers before Advance, never sleep: it returns once the code
// under test is waiting on that many timers.
func Example_fakeClock() {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC))
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New(), Clock: clk, StepTimeout: 5 * time.Second})
	q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{
		JobID: "job-1", RunID: "run-1", JobType: jobqueue.JobBrief, AgentSlug: "agent-a",
	})

	var calls atomic.Int32
	h := jobqueue.Handlers{CallNotebookLM: func(ctx context.Context, job jobqueue.Job, _ json.RawMessage) (jobqueue.Output, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done() // the first call hangs until its step timeout
			return jobqueue.Output{}, ctx.Err()
		}
		return jobqueue.Output{Content: json.RawMessage(`{"title":"t","body":"b","entity_map":{},"word_count":1}`)}, nil
	}}

	c, _ := q.Claim(ctx, "worker-1")
	done := make(chan jobqueue.Job)
	go func() { j, _ := c.Run(ctx, h); done <- j }()
	<-clk.WaitForTimers(2) // the step's deadline and the heartbeat
	clk.Advance(5 * time.Second)
	j := <-done
	fmt.Println(j.Status, j.ErrorCode)

	clk.Advance(jobqueue.DefaultBackoff()[0]) // the first retry's 15 s
	c, _ = q.Claim(ctx, "worker-1")
	j, _ = c.Run(ctx, h)
	fmt.Println(j.Status, "on attempt", j.Attempt)
	// Output:
	// RETRY_BACKOFF TIMEOUT
	// COMPLETE on attempt 2
}
