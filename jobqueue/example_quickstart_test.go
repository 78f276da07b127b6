package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/conveyortest"
)

// SendEmail is the payload of a SEND_EMAIL job: any type encoding/json handles.
type SendEmail struct {
	To string `json:"to"`
}

var smtpDown atomic.Bool // the mail server, down until the requeue

// sendEmail is the job's typed handler; what it returns is the job's result.
func sendEmail(ctx context.Context, e SendEmail) (string, error) {
	if smtpDown.Load() {
		return "", errors.New("smtp: connection refused") // retried, then DEAD
	}
	return "sent to " + e.To, nil
}

// The quickstart: a typed job inserted, retried, DEAD, requeued and read back.
func Example_quickstart() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New(), Types: map[lifecycle.JobType]jobqueue.TypeConfig{
		"SEND_EMAIL": {Handler: jobqueue.Typed(sendEmail), MaxAttempts: 3, Backoff: []time.Duration{time.Millisecond}},
	}})
	go (&jobqueue.Worker{Queue: q, ID: "worker-1"}).Run(ctx)

	smtpDown.Store(true)
	job, _ := q.Insert(ctx, "SEND_EMAIL", SendEmail{To: "ada@example.com"})
	dead, _ := q.Wait(ctx, job.JobID) // COMPLETE, DEAD or CANCELLED
	fmt.Println(dead.Status, "after", dead.Attempt, "attempts:", *dead.Error)

	smtpDown.Store(false)
	q.Retry(ctx, job.JobID) // the requeue: DEAD → QUEUED, with fresh attempts
	done, _ := q.Wait(ctx, job.JobID)
	sent, _ := jobqueue.ResultAs[string](ctx, q, job.JobID)
	fmt.Println(done.Status, "after", done.Attempt, "attempt:", sent)
	// Output:
	// DEAD after 3 attempts: smtp: connection refused
	// COMPLETE after 1 attempt: sent to ada@example.com
}

// A handler test: the real queue on a fake clock, whose retries take no time.
func TestSendEmail(t *testing.T) {
	payload := json.RawMessage(`{"to":"ada@example.com"}`)
	job, res := conveyortest.RunJob(t, jobqueue.Typed(sendEmail), jobqueue.NewJob{JobType: "SEND_EMAIL", Payload: payload})
	if job.Status != lifecycle.JobComplete || string(res.Content) != `"sent to ada@example.com"` {
		t.Fatalf("%s after %d attempts: %s", job.Status, job.Attempt, res.Content)
	}
}
