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
	"github.com/runconveyor/conveyor/lifecycle/conveyortest"
)

// Testing a handler with the fake clock: time moves only when the test
// says, so a step timeout and a retry backoff take no real time. Never
// sleep: AdvanceToNext waits until the code under test is idle (the claim
// and its handler wait on the clock), then moves the clock to the next
// timer. A fake upstream that never answers waits with conveyortest.Hang,
// and the test waits for the claim's first timer before it moves the
// clock, so the claim's goroutine has started by then.
func Example_fakeClock() {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC))
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New(), Clock: clk, StepTimeout: 5 * time.Second})
	q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{
		JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a",
	})

	var calls atomic.Int32
	h := jobqueue.Handlers{CallNotebookLM: func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
		if calls.Add(1) == 1 {
			return lifecycle.JobOutput{}, conveyortest.Hang(ctx) // the first call hangs until its step timeout
		}
		return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"t","body":"b","entity_map":{},"word_count":1}`)}, nil
	}}

	c, _ := q.Claim(ctx, "worker-1")
	done := make(chan lifecycle.Job)
	started := clk.WaitForTimers(clk.Pending() + 1)
	go func() { j, _ := c.Run(ctx, h); done <- j }()
	<-started
	clk.AdvanceToNext(ctx) // the step's deadline, 5 s on
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
