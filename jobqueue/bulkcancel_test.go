package jobqueue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// TestCancelMatching: a bulk cancel ends the filter's waiting jobs
// CANCELLED, asks the RUNNING one's cancel, passes over finished jobs,
// answers a job of an NLM type as refused (JOB_NOT_CANCELLABLE), goes
// page by page, and refuses an actor other than the admin, or a limit
// past MaxBulk, before writing anything.
func TestCancelMatching(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	q := emailQueue(t, clk, jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{}, errors.New("later")
	}))
	for i := range 5 {
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("e-%d", i), JobType: emailType, AgentSlug: fmt.Sprintf("m-%d", i), MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
	}
	// One waits in RETRY_BACKOFF, one runs, one is CANCELLED (finished)
	// before the bulk, two are QUEUED (the claims' order is theirs).
	backoff, _ := claim(t, q, "w1").Run(ctx, nil)
	if backoff.Status != lifecycle.JobRetryBackoff {
		t.Fatalf("ran %s to %s", backoff.JobID, backoff.Status)
	}
	running := claim(t, q, "w2")
	var queued []string
	for i := range 5 {
		if id := fmt.Sprintf("e-%d", i); id != backoff.JobID && id != running.Job().JobID {
			queued = append(queued, id)
		}
	}
	finished := queued[0]
	if _, err := q.Cancel(ctx, lifecycle.ActorAdmin, finished); err != nil {
		t.Fatal(err)
	}
	queued = queued[1:]
	enqueue(t, q, "nlm-0", "agent-n") // an NLM type's job, QUEUED

	for _, r := range []struct {
		name  string
		actor lifecycle.Actor
		jq    jobqueue.JobQuery
		code  string
	}{
		{"orchestration", lifecycle.ActorOrchestration, jobqueue.JobQuery{}, codes.Forbidden},
		{"gateway", lifecycle.ActorGateway, jobqueue.JobQuery{Status: lifecycle.JobQueued}, codes.Forbidden},
		{"limit past MaxBulk", lifecycle.ActorAdmin, jobqueue.JobQuery{Limit: jobqueue.MaxBulk + 1}, codes.InvalidRequest},
	} {
		if _, err := (jobqueue.Operator{Queue: q}).CancelMatching(ctx, r.actor, r.jq); lifecycle.ErrorCode(err) != r.code {
			t.Fatalf("%s: %v, want %s", r.name, err, r.code)
		}
	}
	if j := get(t, q, queued[0]); j.Status != lifecycle.JobQueued {
		t.Fatalf("a refused bulk cancel wrote: %s %s", j.JobID, j.Status)
	}

	var done []string
	var failed []lifecycle.BulkFailure
	jq := jobqueue.JobQuery{Limit: 2}
	for pages := 0; ; pages++ {
		res, err := (jobqueue.Operator{Queue: q}).CancelMatching(ctx, lifecycle.ActorAdmin, jq)
		if err != nil {
			t.Fatal(err)
		}
		if res.Count != len(res.JobIDs) || res.Count > 2 {
			t.Fatalf("page %d: %+v", pages, res)
		}
		done, failed = append(done, res.JobIDs...), append(failed, res.Failed...)
		if res.Next == "" {
			break
		}
		jq.Cursor = res.Next
	}
	want := append([]string{backoff.JobID, running.Job().JobID}, queued...)
	slices.Sort(done)
	slices.Sort(want)
	if !slices.Equal(done, want) {
		t.Fatalf("cancelled %v, want %v", done, want)
	}
	if len(failed) != 1 || failed[0].JobID != "nlm-0" || failed[0].Code != codes.JobNotCancellable {
		t.Fatalf("failed %+v, want nlm-0 %s", failed, codes.JobNotCancellable)
	}
	for _, id := range append([]string{backoff.JobID}, queued...) {
		if j := get(t, q, id); j.Status != lifecycle.JobCancelled {
			t.Fatalf("%s: %s", id, j.Status)
		}
	}
	if j := get(t, q, running.Job().JobID); j.Status != lifecycle.JobRunning || j.CancelRequestedAt == nil {
		t.Fatalf("the running job: %s, asked %v", j.Status, j.CancelRequestedAt)
	}
	if j, _ := running.Run(ctx, nil); j.Status != lifecycle.JobCancelled {
		t.Fatalf("the running job ended %s", j.Status)
	}
	// Only the filter's jobs: none left QUEUED.
	res, err := (jobqueue.Operator{Queue: q}).CancelMatching(ctx, lifecycle.ActorAdmin, jobqueue.JobQuery{Status: lifecycle.JobQueued, Type: emailType})
	if err != nil || res.Count != 0 || len(res.Failed) != 0 {
		t.Fatalf("again: %+v, %v", res, err)
	}
}
