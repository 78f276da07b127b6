package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// killJobs claims and fails for good n jobs of the rig's queue.
func killJobs(t *testing.T, g *rig, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for range n {
		cl, err := g.queue.Claim(ctx, "worker-1")
		if err != nil || cl == nil {
			t.Fatalf("Claim = %v, %v", cl, err)
		}
		dead, err := cl.Run(ctx, jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("no notebook"))
		}})
		if err != nil || dead.Status != lifecycle.JobDead {
			t.Fatalf("Run = %+v, %v", dead, err)
		}
		ids = append(ids, dead.JobID)
	}
	return ids
}

// TestJobDetailRoutes: a job's history names its attempts with their
// error; the queues list each lane; a bulk requeue is the admin's, goes
// page by page and answers what it requeued.
func TestJobDetailRoutes(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	gw, admin := client.Operator{Client: g.client(lifecycle.ActorGateway)}, client.Operator{Client: g.client(lifecycle.ActorAdmin)}
	for i := range 4 {
		if _, err := gw.Client.Enqueue(ctx, lifecycle.NewJob{JobID: fmt.Sprintf("job-%d", i), JobType: lifecycle.JobBrief, AgentSlug: fmt.Sprintf("agent-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	dead := killJobs(t, g, 3)

	h, err := client.Operator{Client: g.client(lifecycle.ActorFrontend)}.JobHistory(ctx, dead[0])
	if err != nil || h.Job.Status != lifecycle.JobDead || len(h.Attempts) != 1 || h.Attempts[0].Error == "" || h.Attempts[0].ErrorCode != codes.JobPermanent {
		t.Fatalf("JobHistory = %+v, %v", h, err)
	}
	if _, err := gw.JobHistory(ctx, "job-nope"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("JobHistory(unknown) = %v", err)
	}
	lanes, err := gw.Queues(ctx)
	if err != nil || len(lanes) != 4 {
		t.Fatalf("Queues = %+v, %v", lanes, err)
	}
	ready := 0
	for _, l := range lanes {
		ready += l.Ready
	}
	if ready != 1 {
		t.Fatalf("ready %d in %+v, want the one job left", ready, lanes)
	}

	_, err = gw.RequeueJobs(ctx, client.Query{Status: "DEAD"})
	apiError(t, err, http.StatusForbidden, codes.Forbidden)
	_, err = admin.RequeueJobs(ctx, client.Query{Status: "DEAD", Limit: jobqueue.MaxBulk + 1})
	apiError(t, err, http.StatusBadRequest, codes.InvalidRequest)
	_, err = admin.RequeueJobs(ctx, client.Query{Status: "DEAD", Cursor: "forged"})
	apiError(t, err, http.StatusBadRequest, codes.InvalidCursor)
	first, err := admin.RequeueJobs(ctx, client.Query{Status: "DEAD", Limit: 1})
	if err != nil || first.Count > 1 || first.Next == "" {
		t.Fatalf("first page = %+v, %v", first, err)
	}
	// A cursor of another filter is refused.
	_, err = admin.RequeueJobs(ctx, client.Query{Status: "FAILED", Limit: 1, Cursor: first.Next})
	apiError(t, err, http.StatusBadRequest, codes.InvalidCursor)
	rest, err := admin.RequeueJobs(ctx, client.Query{Status: "DEAD", Cursor: first.Next, All: true})
	if err != nil || first.Count+rest.Count != 3 || len(rest.Failed) != 0 || rest.Next != "" {
		t.Fatalf("the rest = %+v (first %+v), %v", rest, first, err)
	}
	for _, id := range dead {
		if j, err := gw.Client.Job(ctx, id); err != nil || j.Status != lifecycle.JobQueued {
			t.Fatalf("%s after the bulk requeue: %+v, %v", id, j, err)
		}
	}
	// An unknown field in the body is refused.
	status, _, _ := g.raw("POST", "/jobs/requeue", "tok-admin", "application/json", []byte(`{"state":"DEAD"}`), nil)
	if status != http.StatusBadRequest {
		t.Fatalf("unknown field: %d", status)
	}
}
