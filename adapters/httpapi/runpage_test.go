package httpapi_test

import (
	"context"
	"maps"
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

// TestRepoRunsBoundedPerTenant: a repository's index holds every tenant's
// runs. A tenant whose one run lies behind 250 of another's gets a short
// first page of GET /runs?repo= with a next cursor (a page reads a
// bounded number of entries, not the repository's history), and its run
// on a later page.
func TestRepoRunsBoundedPerTenant(t *testing.T) {
	t.Parallel()
	all := maps.Clone(tokens)
	maps.Copy(all, tenantTokens)
	g := newRig(t, rigOpts{tokens: all})
	submit := func(tenant string) string {
		t.Helper()
		r, err := g.runner.Submit(lifecycle.WithTenant(context.Background(), tenant), lifecycle.SubmitRequest{AgentSlug: "quick", Trigger: "event", RepoID: "octo/repo"})
		if err != nil {
			t.Fatal(err)
		}
		return r.RunID
	}
	mine := submit("acme") // the oldest: last, newest first
	for range 250 {
		submit("bolt")
	}
	acme := &client.Client{BaseURL: g.srv.URL, HTTP: g.srv.Client(), Token: "tok-acme-gw"}
	page, next, err := acme.Runs(context.Background(), client.Query{Repo: "octo/repo", Limit: 50})
	if err != nil || len(page) != 0 || next == "" {
		t.Fatalf("acme's first page: %d runs, next %q, %v; want none and a next cursor", len(page), next, err)
	}
	runs, _, err := acme.Runs(context.Background(), client.Query{Repo: "octo/repo", All: true})
	if err != nil || len(runs) != 1 || runs[0].RunID != mine {
		t.Fatalf("acme's runs of octo/repo: %d, %v; want %s alone", len(runs), err, mine)
	}
}
