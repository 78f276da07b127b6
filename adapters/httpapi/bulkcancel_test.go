package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// emailType is a job type of the user's (the general machine) in the
// tests that configure one.
const emailType lifecycle.JobType = "SEND_EMAIL"

// emailTypes is a Config.Types with emailType, whose handler fails for
// good.
func emailTypes() map[lifecycle.JobType]jobqueue.TypeConfig {
	return map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("no such address"))
	})}}
}

// TestBulkCancelRoute: POST /jobs/cancel over the Go client. The admin's
// cancel of a filter ends its waiting jobs CANCELLED page by page, answers
// a job of an NLM type as refused (JOB_NOT_CANCELLABLE) and passes over
// finished jobs; anyone else, a limit past MaxBulk, a forged cursor and an
// unknown field are refused.
func TestBulkCancelRoute(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{types: emailTypes()})
	ctx := context.Background()
	gw, admin := client.Operator{Client: g.client(lifecycle.ActorGateway)}, client.Operator{Client: g.client(lifecycle.ActorAdmin)}
	for i := range 3 {
		if _, err := gw.Client.Enqueue(ctx, lifecycle.NewJob{JobID: fmt.Sprintf("mail-%d", i), JobType: emailType, AgentSlug: fmt.Sprintf("m-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gw.Client.Enqueue(ctx, lifecycle.NewJob{JobID: "brief-0", JobType: lifecycle.JobBrief, AgentSlug: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CancelJob(ctx, "mail-0"); err != nil { // finished before the bulk
		t.Fatal(err)
	}

	_, err := gw.CancelJobs(ctx, client.Query{Status: "QUEUED"})
	apiError(t, err, http.StatusForbidden, codes.Forbidden)
	_, err = admin.CancelJobs(ctx, client.Query{Status: "QUEUED", Limit: jobqueue.MaxBulk + 1})
	apiError(t, err, http.StatusBadRequest, codes.InvalidRequest)
	_, err = admin.CancelJobs(ctx, client.Query{Status: "QUEUED", Cursor: "forged"})
	apiError(t, err, http.StatusBadRequest, codes.InvalidCursor)
	if status, _, _ := g.raw("POST", "/jobs/cancel", "tok-admin", "application/json", []byte(`{"state":"QUEUED"}`), nil); status != http.StatusBadRequest {
		t.Fatalf("unknown field: %d", status)
	}
	if j, err := gw.Client.Job(ctx, "mail-1"); err != nil || j.Status != lifecycle.JobQueued {
		t.Fatalf("a refused bulk cancel wrote: %+v, %v", j, err)
	}

	first, err := admin.CancelJobs(ctx, client.Query{Limit: 1})
	if err != nil || first.Next == "" {
		t.Fatalf("first page = %+v, %v", first, err)
	}
	rest, err := admin.CancelJobs(ctx, client.Query{Limit: 1, Cursor: first.Next, All: true})
	if err != nil || first.Count+rest.Count != 2 || rest.Next != "" {
		t.Fatalf("the rest = %+v (first %+v), %v", rest, first, err)
	}
	failed := append(first.Failed, rest.Failed...)
	if len(failed) != 1 || failed[0].JobID != "brief-0" || failed[0].Code != codes.JobNotCancellable {
		t.Fatalf("failed %+v, want brief-0 %s", failed, codes.JobNotCancellable)
	}
	for id, want := range map[string]lifecycle.JobState{"mail-0": lifecycle.JobCancelled, "mail-1": lifecycle.JobCancelled, "mail-2": lifecycle.JobCancelled, "brief-0": lifecycle.JobQueued} {
		if j, err := gw.Client.Job(ctx, id); err != nil || j.Status != want {
			t.Fatalf("%s after the bulk cancel: %+v, %v", id, j.Status, err)
		}
	}
}
