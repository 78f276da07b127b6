package run_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// TestTenantListCost: a tenant's page lists and reads its own runs only,
// however many another tenant has (docs/design.md#tenants): 3 runs of
// "small" beside 300 of "big" cost 3 keys listed and 3 statuses read.
func TestTenantListCost(t *testing.T) {
	t.Parallel()
	counting := &teststores.Counting{Store: memStore(t)}
	plain := run.Agent{Slug: "plain", Machine: lifecycle.MachineCancelable, Steps: []run.Step{okStep("a")}}
	// No loop: the runs stay queued, and the store's calls are the lists'.
	r, err := run.NewRunner(run.Config{Store: storage.New(counting), Owner: "a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, plain)
	if err != nil {
		t.Fatal(err)
	}
	big, small := lifecycle.WithTenant(context.Background(), "big"), lifecycle.WithTenant(context.Background(), "small")
	var mine []string
	for i := range 303 {
		ctx := big
		if i%101 == 100 {
			ctx = small
		}
		res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: plain.Slug})
		if err != nil {
			t.Fatal(err)
		}
		if ctx == small {
			mine = append(mine, res.RunID)
		}
	}
	tests := []struct {
		name string
		ctx  context.Context
		q    run.RunQuery
		want int // runs in the page, each about one key listed and one status read
	}{
		{"small's history", small, run.RunQuery{Agent: plain.Slug}, 3},
		{"small's by status", small, run.RunQuery{Status: "queued"}, 3},
		{"big's first page", big, run.RunQuery{Agent: plain.Slug}, 50},
		{"the default tenant's", context.Background(), run.RunQuery{}, 0},
		{"every tenant's operator, small named", lifecycle.WithTenant(context.Background(), lifecycle.AllTenants), run.RunQuery{Tenant: "small"}, 3},
	}
	for _, tt := range tests {
		counting.Reset()
		p, err := r.ListRuns(tt.ctx, tt.q)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		gets, listed := counting.Gets.Load(), counting.Listed.Load()
		t.Logf("%s: %d runs, %d keys listed, %d reads", tt.name, len(p.Runs), listed, gets)
		// A full page lists one entry past it, for its next link.
		if len(p.Runs) != tt.want || gets != int64(tt.want) || listed > int64(tt.want)+1 {
			t.Errorf("%s: %d runs, %d keys listed, %d reads; want %d of each", tt.name, len(p.Runs), listed, gets, tt.want)
		}
		for _, s := range p.Runs {
			if want := lifecycle.TenantOf(tt.ctx); want != lifecycle.AllTenants && s.TenantID != want {
				t.Errorf("%s: run %s of tenant %q", tt.name, s.RunID, s.TenantID)
			}
		}
	}
	// Runs (every run of an agent, from its folders) is confined alike.
	for ctx, want := range map[context.Context]int{small: 3, big: 300, context.Background(): 0, lifecycle.WithTenant(context.Background(), lifecycle.AllTenants): 303} {
		sts, err := r.Runs(ctx, plain.Slug)
		if err != nil || len(sts) != want {
			t.Errorf("Runs for tenant %q: %d runs, %v; want %d", lifecycle.TenantOf(ctx), len(sts), err, want)
		}
	}
	// Big's calls do not reach small's runs; an operator of every tenant's do.
	for _, id := range mine {
		if _, err := r.Status(big, id); !errors.Is(err, lifecycle.ErrRunNotFound) {
			t.Errorf("big reads small's %s: %v", id, err)
		}
		if _, err := r.Cancel(big, id, lifecycle.ActorGateway, run.CancelRequest{}); !errors.Is(err, lifecycle.ErrRunNotFound) {
			t.Errorf("big cancels small's %s: %v", id, err)
		}
		if _, err := r.Steps(context.Background(), id); !errors.Is(err, lifecycle.ErrRunNotFound) {
			t.Errorf("the default tenant reads small's %s steps: %v", id, err)
		}
		if st, err := r.Status(lifecycle.WithTenant(context.Background(), lifecycle.AllTenants), id); err != nil || st.TenantID != "small" {
			t.Errorf("an operator of every tenant reads %s: %+v, %v", id, st, err)
		}
	}
}

// TestTenantIdempotencyKeys: the default tenant's key is hashed as before
// tenants (so a record written then still answers), another tenant's
// names the tenant, and one key in two tenants makes two runs.
func TestTenantIdempotencyKeys(t *testing.T) {
	t.Parallel()
	g := newRig(t, memStore(t))
	plain := run.Agent{Slug: "plain", Steps: []run.Step{okStep("a")}}
	r, _ := g.runner("a", nil, plain)
	const key = "api:gateway:req-1"
	ids := map[string]string{}
	for _, tenant := range []string{"", "acme", "bolt", "", "acme"} {
		res, err := r.Submit(lifecycle.WithTenant(context.Background(), tenant), lifecycle.SubmitRequest{AgentSlug: plain.Slug, IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		if first, seen := ids[tenant]; seen && (res.RunID != first || !res.Duplicate) {
			t.Errorf("tenant %q again: %+v, want its run %s", tenant, res, first)
		} else if !seen {
			ids[tenant] = res.RunID
		}
	}
	if len(ids) != 3 || ids[""] == ids["acme"] || ids["acme"] == ids["bolt"] {
		t.Errorf("runs by tenant %v, want three", ids)
	}
	for tenant, stored := range map[string]string{"": key, "acme": "tenant:acme|" + key} {
		b, _, err := g.store.Get(context.Background(), layout.IdempotencyKey(stored))
		if err != nil {
			t.Errorf("tenant %q: no record at the hash of %q: %v", tenant, stored, err)
		} else if named := strings.Contains(string(b), `"tenant_id":"acme"`); named != (tenant == "acme") {
			t.Errorf("tenant %q: record %s", tenant, b)
		}
	}
}

// TestTenantStepContext: a step acts for its run's tenant, so what it
// submits or inserts with its context is that tenant's.
func TestTenantStepContext(t *testing.T) {
	t.Parallel()
	g := newRig(t, memStore(t))
	seen := make(chan string, 2)
	agent := run.Agent{Slug: "plain", Steps: []run.Step{{Name: "a", Idempotent: true, Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
		seen <- lifecycle.TenantOf(ctx)
		return run.StepOutput{}, nil
	}}}}
	r, _ := g.runner("a", nil, agent)
	for _, tenant := range []string{"acme", ""} {
		ctx := lifecycle.WithTenant(context.Background(), tenant)
		res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: agent.Slug})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-seen:
			if got != tenant {
				t.Errorf("the step of a run of %q acts for %q", tenant, got)
			}
		case <-time.After(failAfter):
			t.Fatalf("run %s: no step", res.RunID)
		}
	}
}

// TestTenantRepoRuns: a repository's runs are listed as an agent's are, by
// tenant (a caller of every tenant names one), and a page reads a bounded
// number of entries however few match: 300 runs of "big" in the
// repository beside 1 of "small" cost small's first page at most its
// budget of reads, with a next cursor to go on.
func TestTenantRepoRuns(t *testing.T) {
	t.Parallel()
	counting := &teststores.Counting{Store: memStore(t)}
	plain := run.Agent{Slug: "plain", Machine: lifecycle.MachineCancelable, Steps: []run.Step{okStep("a")}}
	r, err := run.NewRunner(run.Config{Store: storage.New(counting), Owner: "a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, plain)
	if err != nil {
		t.Fatal(err)
	}
	big, small := lifecycle.WithTenant(context.Background(), "big"), lifecycle.WithTenant(context.Background(), "small")
	all := lifecycle.WithTenant(context.Background(), lifecycle.AllTenants)
	if _, err := r.Submit(small, lifecycle.SubmitRequest{AgentSlug: plain.Slug, RepoID: "octo/repo"}); err != nil {
		t.Fatal(err)
	}
	for range 300 {
		if _, err := r.Submit(big, lifecycle.SubmitRequest{AgentSlug: plain.Slug, RepoID: "octo/repo"}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		ctx      context.Context
		q        run.RunQuery
		want     int
		maxReads int64 // an entry costs its run's index entry and status; another tenant's, the index entry
	}{
		{"big's", big, run.RunQuery{Repo: "octo/repo", Limit: 10}, 10, 2 * 10},
		{"small's first page", small, run.RunQuery{Repo: "octo/repo", Limit: 10}, 0, 200},
		{"every tenant's, small named", all, run.RunQuery{Repo: "octo/repo", Tenant: "small", Limit: 10}, 0, 2 * 200},
		{"every tenant's, none named: the default", all, run.RunQuery{Repo: "octo/repo", Limit: 10}, 0, 2 * 200},
	}
	for _, tt := range tests {
		counting.Reset()
		p, err := r.ListRuns(tt.ctx, tt.q)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if gets := counting.Gets.Load(); len(p.Runs) != tt.want || gets > tt.maxReads {
			t.Errorf("%s: %d runs, %d reads; want %d runs, at most %d reads", tt.name, len(p.Runs), gets, tt.want, tt.maxReads)
		}
		if tt.want == 0 && p.Next == "" {
			t.Errorf("%s: no next cursor past the entries read", tt.name)
		}
		for _, s := range p.Runs {
			if s.TenantID != "big" {
				t.Errorf("%s: run %s of tenant %q", tt.name, s.RunID, s.TenantID)
			}
		}
	}
	// Small's run is reached by following the cursor.
	found, q := 0, run.RunQuery{Repo: "octo/repo", Limit: 10}
	for pages := 0; pages < 10; pages++ {
		p, err := r.ListRuns(small, q)
		if err != nil {
			t.Fatal(err)
		}
		found += len(p.Runs)
		if q.Cursor = p.Next; q.Cursor == "" {
			break
		}
	}
	if found != 1 {
		t.Errorf("small's runs of octo/repo, every page: %d; want 1", found)
	}
}
