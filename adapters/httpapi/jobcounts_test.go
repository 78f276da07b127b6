package httpapi_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestJobCountsRoute: GET /stats/jobs/counts over the Go client equals
// the counts of GET /jobs right after a completion, a failure, a requeue
// and a cancel made over HTTP; GET /stats/jobs/activity shows them in
// the current minute; the NLM backend may read neither.
func TestJobCountsRoute(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{types: emailTypes()})
	ctx := context.Background()
	gw, admin := g.client(lifecycle.ActorGateway), client.Operator{Client: g.client(lifecycle.ActorAdmin)}
	same := func(after string) {
		t.Helper()
		jobs, _, err := gw.Jobs(ctx, client.Query{All: true})
		if err != nil {
			t.Fatal(err)
		}
		list := map[string]int64{}
		for _, j := range jobs {
			list[fmt.Sprintf("%s/%s/%s", j.JobType, j.AgentSlug, j.Status)]++
		}
		c, err := client.Operator{Client: gw}.JobCounts(ctx)
		if err != nil || c.Partial {
			t.Fatalf("JobCounts = %+v, %v", c, err)
		}
		counts := map[string]int64{}
		for _, r := range c.Rows {
			for st, n := range r.Counts {
				counts[fmt.Sprintf("%s/%s/%s", r.JobType, r.AgentSlug, st)] += n
			}
		}
		if !maps.Equal(list, counts) {
			t.Fatalf("after %s: counts %v, the list %v", after, counts, list)
		}
	}
	for i := range 3 {
		if _, err := gw.Enqueue(ctx, lifecycle.NewJob{JobID: fmt.Sprintf("mail-%d", i), JobType: emailType, AgentSlug: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	same("the enqueues")
	// mail-0, first in its lane, fails for good: DEAD.
	c, err := g.queue.Claim(ctx, "w1")
	if err != nil || c == nil || c.Job().JobID != "mail-0" {
		t.Fatalf("claim: %v, %v", c, err)
	}
	if j, err := c.Run(ctx, nil); err != nil || j.Status != lifecycle.JobDead {
		t.Fatalf("mail-0 ran to %s, %v", j.Status, err)
	}
	if _, err := gw.Enqueue(ctx, lifecycle.NewJob{JobID: "brief-0", JobType: lifecycle.JobBrief, AgentSlug: "b"}); err != nil {
		t.Fatal(err)
	}
	same("a failure")
	if _, err := gw.Requeue(ctx, "mail-0"); err == nil {
		t.Fatal("the gateway requeued")
	}
	if _, err := admin.Client.Requeue(ctx, "mail-0"); err != nil {
		t.Fatal(err)
	}
	same("a requeue")
	if _, err := admin.CancelJobs(ctx, client.Query{Status: "QUEUED", Type: string(emailType), All: true}); err != nil {
		t.Fatal(err)
	}
	same("a bulk cancel")

	a, err := client.Operator{Client: gw}.JobActivity(ctx)
	if err != nil || len(a.Minutes) != 60 {
		t.Fatalf("JobActivity = %d minutes, %v", len(a.Minutes), err)
	}
	now := a.Minutes[59]
	if now.Failed < 1 || now.Cancelled < 1 {
		t.Fatalf("the last minute %+v, want a failure and the cancels", now)
	}
	_, err = client.Operator{Client: g.client(lifecycle.ActorNLMBackend)}.JobCounts(ctx)
	apiError(t, err, http.StatusForbidden, codes.Forbidden)
}
