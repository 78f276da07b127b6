package httpapi_test

import (
	"context"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/lifecycle"
)

// GET /runs/{runId}/steps lists every declared step, pending ones
// included, then each step's file; the submit's source is the run's
// trigger_source; GET /runs?repo= lists a repository's runs, newest first
// (docs/spec.md#the-run-page, #run-status).
func TestStepsListPendingAndRunsByRepo(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	c := g.client(lifecycle.ActorGateway)
	ctx := context.Background()
	res, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick", Source: "cli", Caller: lifecycle.Caller{UserID: "u-7"}})
	if err != nil {
		t.Fatal(err)
	}
	steps, err := c.Steps(ctx, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].StepName != "load" || steps[0].Status != lifecycle.StepPending || steps[1].StepName != "write" || steps[1].Status != lifecycle.StepPending || steps[1].StepNumber != 2 {
		t.Errorf("a requested run's steps: %+v; want load and write pending", steps)
	}
	st, err := c.Status(ctx, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if ts := st.TriggerSource; ts == nil || ts.Source != "cli" || ts.UserID != "u-7" {
		t.Errorf("trigger_source %+v; want cli for u-7", ts)
	}

	var ids []string
	for range 2 {
		r, err := g.runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick", Trigger: "event", RepoID: "octo/repo", PRID: "9"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.RunID)
	}
	runs, _, err := c.Runs(ctx, client.Query{Repo: "octo/repo"})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].StartedAt.Before(runs[1].StartedAt) || runs[0].RepoID != "octo/repo" {
		t.Errorf("runs of octo/repo: %+v; want both, newest first", runs)
	}
	for _, r := range runs {
		if r.RunID != ids[0] && r.RunID != ids[1] {
			t.Errorf("run %s listed for octo/repo", r.RunID)
		}
	}
}
