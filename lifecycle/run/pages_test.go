package run_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// pagesRig runs 5 runs of an approval agent (the 2 oldest approved, so
// completed; 3 parked) and then 3 of a canonical agent (completed), a
// second of fake time apart, and returns the ids oldest first.
func pagesRig(t *testing.T) (*rig, *run.Runner, []run.Agent, []string, []string) {
	g := newRig(t, memStore(t))
	gated := run.Agent{Slug: "gated", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("plan", &run.Await{Approval: "merge"}), okStep("apply")}}
	plain := run.Agent{Slug: "plain", Steps: []run.Step{okStep("a")}}
	r, _ := g.runner("a", nil, gated, plain)
	var a, b []string
	for i := range 5 {
		g.clock.Advance(time.Second)
		id := submit(t, r, gated.Slug)
		if st := g.wait(r, id, 0, 0); st.Status != "awaiting_approval" {
			t.Fatalf("run %s is %s", id, st.Status)
		}
		if i < 2 {
			if _, err := r.Approve(context.Background(), id, lifecycle.ActorGateway, run.Decision{}); err != nil {
				t.Fatal(err)
			}
			if st := g.wait(r, id, time.Second, time.Minute); st.Status != "completed" {
				t.Fatalf("run %s is %s", id, st.Status)
			}
		}
		a = append(a, id)
	}
	for range 3 {
		g.clock.Advance(time.Second)
		id := submit(t, r, plain.Slug)
		if st := g.wait(r, id, time.Second, time.Minute); st.Status != "completed" {
			t.Fatalf("run %s is %s", id, st.Status)
		}
		b = append(b, id)
	}
	return g, r, []run.Agent{gated, plain}, a, b
}

// pageIDs reads every page of q, limit by limit, and returns the run ids
// in the order read and the number of pages.
func pageIDs(t *testing.T, r *run.Runner, q run.RunQuery) ([]string, int) {
	t.Helper()
	var ids []string
	pages := 0
	for {
		p, err := r.ListRuns(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range p.Runs {
			if q.Status != "" && s.Status != q.Status {
				t.Fatalf("run %s is %s in a page of %s", s.RunID, s.Status, q.Status)
			}
			ids = append(ids, s.RunID)
		}
		if p.Next == "" {
			return ids, pages
		}
		if pages > 20 {
			t.Fatal("the pages never end")
		}
		q.Cursor = p.Next
	}
}

func reversed(ids ...[]string) []string {
	out := slices.Concat(ids...)
	slices.Reverse(out)
	return out
}

func TestListRunsPages(t *testing.T) {
	t.Parallel()
	_, r, _, a, b := pagesRig(t)
	tests := []struct {
		name  string
		q     run.RunQuery
		want  []string
		pages int
	}{
		{"an agent, by 2", run.RunQuery{Agent: "gated", Limit: 2}, reversed(a), 3},
		{"an agent, default limit", run.RunQuery{Agent: "gated"}, reversed(a), 1},
		{"an agent and a status", run.RunQuery{Agent: "gated", Status: "awaiting_approval", Limit: 1}, reversed(a[2:]), 3},
		{"a status across agents", run.RunQuery{Status: "completed", Limit: 4}, reversed(a[:2], b), 2},
		{"every run", run.RunQuery{Limit: 3}, reversed(a, b), 3},
		{"a status no run is in", run.RunQuery{Status: "running"}, nil, 1},
		{"an agent without runs", run.RunQuery{Agent: "gone"}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, pages := pageIDs(t, r, tt.q)
			if !slices.Equal(got, tt.want) || pages != tt.pages {
				t.Fatalf("got %v in %d pages, want %v in %d", got, pages, tt.want, tt.pages)
			}
		})
	}
}

func TestListRunsRefuses(t *testing.T) {
	t.Parallel()
	g := newRig(t, memStore(t))
	r, _ := g.runner("a", nil, run.Agent{Slug: "plain", Steps: []run.Step{okStep("a")}})
	tests := []struct {
		name string
		q    run.RunQuery
		code string
	}{
		{"negative limit", run.RunQuery{Limit: -1}, codes.InvalidRequest},
		{"limit over the most", run.RunQuery{Limit: codes.MaxPageLimit + 1}, codes.InvalidRequest},
		{"cursor not base64", run.RunQuery{Cursor: "!!"}, codes.InvalidCursor},
		{"cursor of another list", run.RunQuery{Cursor: layout.EncodeCursor("jobs/x.json")}, codes.InvalidCursor},
		{"unknown status", run.RunQuery{Status: "sleeping"}, codes.InvalidRequest},
		{"agent not an id", run.RunQuery{Agent: "../x"}, codes.InvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.ListRuns(context.Background(), tt.q)
			if got := lifecycle.ErrorCode(err); got != tt.code {
				t.Fatalf("code %q (%v), want %s", got, err, tt.code)
			}
		})
	}
}

// TestListRunsSkipsAndRepairsStaleEntries: an entry left under a status
// its run has left (a writer that died between its status write and the
// index move) never shows a wrong row, and the repair pass deletes it and
// puts back a missing one; the backfill indexes runs written before the
// indexes existed.
func TestListRunsSkipsAndRepairsStaleEntries(t *testing.T) {
	t.Parallel()
	g, r, agents, a, b := pagesRig(t)
	ctx := context.Background()
	st, err := r.Status(ctx, a[0]) // completed
	if err != nil {
		t.Fatal(err)
	}
	stale, _ := layout.RunStatusIndexKey("gated", "running", st.StartedAt, a[0])
	if _, err := g.store.Put(ctx, stale, nil, storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	parked, err := r.Status(ctx, a[4])
	if err != nil {
		t.Fatal(err)
	}
	missing, _ := layout.RunStatusIndexKey("gated", "awaiting_approval", parked.StartedAt, a[4])
	if err := g.store.Delete(ctx, missing, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	// b's runs as a store written before the indexes: no history entries,
	// no backfill marker.
	for _, id := range b {
		s, err := r.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		keys, _ := layout.RunIndexKeys("plain", id, s.Status, s.StartedAt)
		for _, k := range keys[2:] {
			if err := g.store.Delete(ctx, k, storage.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	marker, _ := layout.RunBackfillKey("plain")
	if err := g.store.Delete(ctx, marker, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := pageIDs(t, r, run.RunQuery{Agent: "gated", Status: "running"}); len(got) != 0 {
		t.Fatalf("a stale entry showed %v as running", got)
	}
	if got, _ := pageIDs(t, r, run.RunQuery{Agent: "plain"}); len(got) != 0 {
		t.Fatalf("runs without entries listed: %v", got)
	}

	// A runner with a short repair interval repairs them.
	r2, _ := g.runner("b", func(c *run.Config) { c.IndexRepairInterval = 2 * time.Second }, agents...)
	g.advanceUntil(time.Second, time.Minute, func() bool {
		_, _, errStale := g.store.Get(ctx, stale)
		_, _, errMissing := g.store.Get(ctx, missing)
		got, _ := pageIDs(t, r2, run.RunQuery{Agent: "plain"})
		return errors.Is(errStale, storage.ErrNotFound) && errMissing == nil && slices.Equal(got, reversed(b))
	}, func() string { return "the index was not repaired" })
	if got, _ := pageIDs(t, r2, run.RunQuery{Agent: "gated", Status: "awaiting_approval"}); !slices.Equal(got, reversed(a[2:])) {
		t.Fatalf("after the repair: %v, want %v", got, reversed(a[2:]))
	}
}

// TestRunningByHeartbeat: the executing runs, the oldest heartbeat first;
// a lost runner's run (its heartbeat stopped) comes before a live one.
func TestRunningByHeartbeat(t *testing.T) {
	t.Parallel()
	g := newRig(t, memStore(t))
	b := newBlocker()
	step := b.step("work")
	agent := run.Agent{Slug: "long", Concurrency: 2, Steps: []run.Step{step}}
	lost, stopLost := g.runner("lost", nil, agent)
	first := submit(t, lost, agent.Slug)
	<-b.started
	stopLost() // its lease stays, its heartbeat stops
	g.clock.Advance(time.Minute)
	live, _ := g.runner("live", nil, agent)
	second := submit(t, live, agent.Slug)
	g.waitFor(live, second, 0, 0, func(st lifecycle.RunStatus) bool { return st.Status == "running" })
	got, err := live.RunningByHeartbeat(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range got {
		ids = append(ids, s.RunID)
	}
	if !slices.Equal(ids, []string{first, second}) {
		t.Fatalf("running by heartbeat: %v, want %v", ids, []string{first, second})
	}
	if got, _ := live.RunningByHeartbeat(context.Background(), 1); len(got) != 1 || got[0].RunID != first {
		t.Fatalf("limit 1: %+v", got)
	}
	close(b.release)
}
