package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// A feed serves what any process writes to the store: here a job queue
// sharing it runs a job, and a client of the stream sees its moves.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	store := memstore.New()
	feed, _ := events.New(events.Config{Store: store, PollInterval: 10 * time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); _ = feed.Run(ctx) }()
	srv := httptest.NewServer(feed) // the Worker mounts it at GET /events/stream
	defer func() { cancel(); <-done; srv.Close() }()

	resp, err := srv.Client().Get(srv.URL + "/events/stream")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()

	// The queue writes a job's moves to the audit log when the job comes
	// to rest (done, dead, or waiting to retry): here a first attempt that
	// fails, so the stream sees the job created, validated, picked up and
	// sent to RETRY_BACKOFF.
	q, _ := jobqueue.New(jobqueue.Config{Store: store})
	_, _ = q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "archivist"})
	if c, _ := q.Claim(ctx, "worker-1"); c != nil {
		_, _ = c.Run(ctx, jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{}, errors.New("NLM backend unavailable")
		}})
	}

	n := 0
	for ev, err := range events.Read(resp.Body) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(ev.Type, string(ev.Data))
		if n++; n == 5 {
			break
		}
	}
	// Output:
	// job.status.changed {"type":"job.status.changed","jobId":"job-1","status":"PENDING","from":""}
	// job.status.changed {"type":"job.status.changed","jobId":"job-1","status":"QUEUED","from":"PENDING"}
	// job.status.changed {"type":"job.status.changed","jobId":"job-1","status":"CONTEXT_ASSEMBLY","from":"QUEUED"}
	// job.status.changed {"type":"job.status.changed","jobId":"job-1","status":"NOTEBOOKLM_CALL","from":"CONTEXT_ASSEMBLY"}
	// job.status.changed {"type":"job.status.changed","jobId":"job-1","status":"RETRY_BACKOFF","from":"NOTEBOOKLM_CALL"}
}
