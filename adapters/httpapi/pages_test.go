package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestRunsPages: GET /runs answers a plain array, newest first, with the
// next page in a Link rel="next" header, filtered by agent and status; the
// client follows the links.
func TestRunsPages(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{running: true})
	c := g.client(lifecycle.ActorGateway)
	ctx := context.Background()
	var ids []string
	for range 5 {
		res, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"})
		if err != nil {
			t.Fatal(err)
		}
		g.waitStatus(res.RunID)
		ids = append(ids, res.RunID)
	}
	gate, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "gate"})
	if err != nil {
		t.Fatal(err)
	}
	g.waitStatus(gate.RunID) // awaiting_approval
	// Run ids sort by their second; runs of one second are ordered by
	// started_at, which the ids may not follow: compare as sets per page
	// count, and the order through started_at.
	var seen []lifecycle.RunStatus
	path := "/runs?agent=quick&limit=2"
	for pages := 0; path != ""; pages++ {
		if pages > 3 {
			t.Fatal("more than 3 pages of 2 for 5 runs")
		}
		status, h, body := g.raw("GET", path, "tok-gateway", "", nil, nil)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		if !strings.HasPrefix(string(body), "[") {
			t.Fatalf("GET %s: body %s is not an array", path, body)
		}
		var page []lifecycle.RunStatus
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, page...)
		path = ""
		if next := wire.NextCursor(h); next != "" {
			link := h.Get("Link")
			path = link[1:strings.Index(link, ">")]
			if !strings.Contains(path, "agent=quick") || !strings.Contains(path, "limit=2") || !strings.HasSuffix(link, `rel="next"`) {
				t.Fatalf("Link %q", link)
			}
		}
	}
	if len(seen) != 5 {
		t.Fatalf("%d runs in the pages, want 5", len(seen))
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].StartedAt.After(seen[i-1].StartedAt) {
			t.Fatalf("not newest first: %s after %s", seen[i].StartedAt, seen[i-1].StartedAt)
		}
	}
	var all []string
	every, next, err := c.Runs(ctx, client.Query{Agent: "quick", Limit: 2, All: true})
	if err != nil || next != "" {
		t.Fatalf("Runs(All): next %q, %v", next, err)
	}
	for _, st := range every {
		all = append(all, st.RunID)
	}
	got := slices.Clone(all)
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("AllRuns %v, want %v", all, ids)
	}
	parked, next, err := c.Runs(ctx, client.Query{Status: "awaiting_approval"})
	if err != nil || len(parked) != 1 || parked[0].RunID != gate.RunID || next != "" {
		t.Fatalf("runs awaiting approval across agents: %+v next %q (%v)", parked, next, err)
	}
	tests := []struct {
		path string
		code string
	}{
		{"/runs?agent=quick&limit=0", codes.InvalidRequest},
		{"/runs?agent=quick&limit=501", codes.InvalidRequest},
		{"/runs?agent=quick&limit=ten", codes.InvalidRequest},
		{"/runs?agent=quick&cursor=%21%21", codes.InvalidCursor},
		{"/runs?status=sleeping", codes.InvalidRequest},
	}
	for _, tt := range tests {
		status, _, body := g.raw("GET", tt.path, "tok-gateway", "", nil, nil)
		if status != http.StatusBadRequest || !strings.Contains(string(body), tt.code) {
			t.Errorf("GET %s: %d %s, want 400 %s", tt.path, status, body, tt.code)
		}
	}
}

// TestOtherListsPage: /jobs, /inbox/entries and /quarantine page the same
// way, and filter jobs by status, type and agent.
func TestOtherListsPage(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	gw, admin := g.client(lifecycle.ActorGateway), g.client(lifecycle.ActorAdmin)
	for i, agent := range []string{"quick", "quick", "slow", "quick", "slow"} {
		typ := lifecycle.JobBrief
		if i == 3 {
			typ = lifecycle.JobResearch
		}
		if _, err := gw.Enqueue(ctx, lifecycle.NewJob{RunID: "run-1", JobType: typ, AgentSlug: agent}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := gw.SubmitInbox(ctx, lifecycle.InboxSubmission{Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
			Intent: lifecycle.InboxIntent{Action: "research", Target: "violins"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"jobs/bad-1.json", "jobs/bad-2.json", "jobs/bad-3.json"} {
		if _, err := records.Quarantine(ctx, g.store, &lifecycle.QuarantinedError{Key: key, Data: []byte("{"), Reason: "test"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	count := func(seq func(yield func(int, error) bool)) int {
		n := 0
		for k, err := range seq {
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
		return n
	}
	tests := []struct {
		name string
		read func(cursor string) (n int, next string, err error)
		want int
	}{
		{"jobs", func(c string) (int, string, error) {
			j, n, err := gw.Jobs(ctx, client.Query{Limit: 2, Cursor: c})
			return len(j), n, err
		}, 5},
		{"jobs of an agent", func(c string) (int, string, error) {
			j, n, err := gw.Jobs(ctx, client.Query{Agent: "slow", Limit: 1, Cursor: c})
			return len(j), n, err
		}, 2},
		{"jobs of a type and status", func(c string) (int, string, error) {
			j, n, err := gw.Jobs(ctx, client.Query{Type: string(lifecycle.JobResearch), Status: string(lifecycle.JobQueued), Cursor: c})
			return len(j), n, err
		}, 1},
		{"inbox entries", func(c string) (int, string, error) {
			e, n, err := gw.InboxEntries(ctx, client.Query{Status: string(lifecycle.InboxPending), Limit: 2, Cursor: c})
			return len(e), n, err
		}, 3},
		{"quarantine", func(c string) (int, string, error) {
			q, n, err := admin.Quarantine(ctx, client.Query{Limit: 2, Cursor: c})
			return len(q), n, err
		}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := count(func(yield func(int, error) bool) {
				cursor := ""
				for range 10 {
					n, next, err := tt.read(cursor)
					if !yield(n, err) || next == "" {
						return
					}
					cursor = next
				}
				t.Error("the pages never end")
			})
			if got != tt.want {
				t.Fatalf("%d items over the pages, want %d", got, tt.want)
			}
		})
	}
	for _, path := range []string{"/jobs?status=SLEEPING", "/jobs?limit=900", "/inbox/entries?cursor=zz", "/quarantine?limit=-2"} {
		status, _, body := g.raw("GET", path, "tok-admin", "", nil, nil)
		if status != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s, want 400", path, status, body)
		}
	}
}
