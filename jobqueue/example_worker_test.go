package jobqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

func ExampleWorker() {
	ctx, cancel := context.WithCancel(context.Background())
	q, _ := jobqueue.New(jobqueue.Config{
		Store:   memstore.New(),
		Backoff: []time.Duration{10 * time.Millisecond}, // the default 15 s, shortened for the example
		Logger:  slog.New(slog.DiscardHandler),
	})
	for i, agent := range []string{"architect-guardian", "archivist-violin", "architect-guardian"} {
		_, _ = q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{
			JobID: fmt.Sprintf("job-%d", i+1), RunID: "run_2026-02-24_abc123", JobType: lifecycle.JobBrief, AgentSlug: agent,
		})
	}

	// The NLM backend answers 503 the first time it is asked about job-2.
	var refused atomic.Bool
	w := &jobqueue.Worker{Queue: q, ID: "worker-1", Slots: 2, Handlers: jobqueue.Handlers{
		CallNotebookLM: func(ctx context.Context, job lifecycle.Job, snapshot json.RawMessage) (lifecycle.JobOutput, error) {
			if job.JobID == "job-2" && refused.CompareAndSwap(false, true) {
				return lifecycle.JobOutput{}, &jobqueue.StatusError{Code: 503}
			}
			return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"Brief","body":"Short","entity_map":{},"word_count":1}`)}, nil
		},
	}}
	stopped := make(chan struct{})
	go func() { _ = w.Run(ctx); close(stopped) }()

	for !allDone(ctx, q) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-stopped
	for j, err := range q.List(context.Background(), lifecycle.ActorAdmin) {
		if err != nil {
			fmt.Println(err)
			break
		}
		fmt.Println(j.JobID, j.Status, "attempt", j.Attempt)
	}
	// Output:
	// job-1 COMPLETE attempt 1
	// job-2 COMPLETE attempt 2
	// job-3 COMPLETE attempt 1
}

// allDone tells whether every job has reached a terminal state.
func allDone(ctx context.Context, q *jobqueue.Queue) bool {
	for j, err := range q.List(ctx, lifecycle.ActorAdmin) {
		if err != nil || !machine.JobMachine().IsTerminal(j.Status) {
			return false
		}
	}
	return true
}
