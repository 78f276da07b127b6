package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/proposals"
	"github.com/runconveyor/conveyor/lifecycle"
)

// seedProposals records n pending proposals of one run, as a step would.
func seedProposals(t *testing.T, g *rig, ids ...string) {
	t.Helper()
	ps := proposals.New(g.store, nil, "", nil)
	for _, id := range ids {
		if _, err := ps.Create(context.Background(), lifecycle.ActorMastra, lifecycle.Proposal{ID: id, RunID: "run_1", AgentSlug: "quick",
			ContentKey: "agents/quick/runs/run_1/output/" + id + ".json"}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProposalRoutes reads the pending proposals page by page, one
// proposal, and decides one as the gateway; the frontend reads but may not
// decide, and a decided proposal leaves the pending list and answers
// CONFLICT when decided again.
func TestProposalRoutes(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	seedProposals(t, g, "prop_a", "prop_b", "prop_c")
	reader := client.Proposals{Client: g.client(lifecycle.ActorFrontend)}
	page, next, err := reader.Pending(ctx, client.Query{Limit: 2})
	if err != nil || len(page) != 2 || next == "" {
		t.Fatalf("first page: %d, %q, %v", len(page), next, err)
	}
	all, _, err := reader.Pending(ctx, client.Query{All: true})
	if err != nil || len(all) != 3 {
		t.Fatalf("all: %d, %v", len(all), err)
	}
	p, err := reader.Get(ctx, "prop_b")
	if err != nil || p.ID != "prop_b" || p.Status != lifecycle.ProposalPending || p.SchemaVersion != 1 {
		t.Fatalf("Get = %+v, %v", p, err)
	}
	apiError(t, func() error { _, err := reader.Get(ctx, "prop_none"); return err }(), http.StatusNotFound, "NOT_FOUND")
	apiError(t, func() error { _, err := reader.Decide(ctx, "prop_b", true, ""); return err }(), http.StatusForbidden, "FORBIDDEN")

	gw := client.Proposals{Client: g.client(lifecycle.ActorGateway)}
	p, err = gw.Decide(ctx, "prop_b", false, "a duplicate")
	if err != nil || p.Status != lifecycle.ProposalRejected || p.Reason != "a duplicate" || p.DecidedBy != lifecycle.ActorGateway {
		t.Fatalf("Decide = %+v, %v", p, err)
	}
	apiError(t, func() error { _, err := gw.Decide(ctx, "prop_b", true, ""); return err }(), http.StatusConflict, "CONFLICT")
	all, _, err = gw.Pending(ctx, client.Query{All: true})
	if err != nil || len(all) != 2 || all[0].ID == "prop_b" || all[1].ID == "prop_b" {
		t.Fatalf("pending after a decision: %+v, %v", all, err)
	}
	code, _, body := g.raw("POST", "/proposals/prop_a/decision", "tok-gateway", "application/json", []byte(`{"status":"pending"}`), nil)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "INVALID_REQUEST") {
		t.Fatalf("a decision to pending: %d %s", code, body)
	}
}

// TestZoneGuest: a zone guest's token submits to the inbox, its zone
// recorded as the entry's identity whatever the body says, and every other
// route of the table answers it 403.
func TestZoneGuest(t *testing.T) {
	t.Parallel()
	toks := maps.Clone(tokens)
	toks["tok-guest"] = "guest:zone_abc"
	g := newRig(t, rigOpts{tokens: toks})
	body, _ := json.Marshal(lifecycle.InboxSubmission{Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
		Intent: lifecycle.InboxIntent{Action: "propose-edit", Target: "notes/a"}})
	code, _, out := g.raw("POST", "/inbox/submit", "tok-guest", "application/json", body, nil)
	if code != http.StatusCreated {
		t.Fatalf("guest submit: %d %s", code, out)
	}
	var ans struct {
		InboxID string `json:"inbox_id"`
	}
	if err := json.Unmarshal(out, &ans); err != nil {
		t.Fatal(err)
	}
	e, err := g.box.Get(context.Background(), ans.InboxID)
	if err != nil || e.Source.Identity != "guest:zone_abc" {
		t.Fatalf("entry %+v, %v: want identity guest:zone_abc", e, err)
	}
	s, err := httpapi.New(httpapi.Config{Runner: g.runner})
	if err != nil {
		t.Fatal(err)
	}
	routes := httpapi.Routes(s)
	if len(routes) < 20 {
		t.Fatalf("only %d routes in the table", len(routes))
	}
	for _, rt := range routes {
		if rt == [2]string{"POST", "/inbox/submit"} || rt[1] == "/healthz" { // health answers anyone, no token needed
			continue
		}
		path := rt[1]
		for strings.Contains(path, "{") {
			i, j := strings.Index(path, "{"), strings.Index(path, "}")
			path = path[:i] + "x1" + path[j+1:]
		}
		var b []byte
		ct := ""
		if rt[0] == "POST" || rt[0] == "PUT" || rt[0] == "PATCH" {
			b, ct = []byte(`{}`), "application/json"
		}
		if code, _, out := g.raw(rt[0], path, "tok-guest", ct, b, nil); code != http.StatusForbidden {
			t.Errorf("guest %s %s: %d %s, want 403", rt[0], path, code, out)
		}
	}
	// The parser takes a guest's token, and refuses a zone that is no id.
	if m, err := httpapi.ParseTokens("t1=guest:zone_abc"); err != nil || m["t1"] != "guest:zone_abc" {
		t.Fatalf("ParseTokens: %v, %v", m, err)
	}
	if _, err := httpapi.ParseTokens("t1=guest:../x"); err == nil {
		t.Fatal("a guest of a zone that is no id was taken")
	}
}

// TestPendingProposalsBoundedPerTenant: the pending index holds every
// tenant's proposals. A tenant whose one proposal lies behind 250 of
// another's gets a short first page with a next cursor (a page reads a
// bounded number of entries, not the whole index), and its proposal on a
// later page.
func TestPendingProposalsBoundedPerTenant(t *testing.T) {
	t.Parallel()
	all := maps.Clone(tokens)
	maps.Copy(all, tenantTokens)
	g := newRig(t, rigOpts{tokens: all})
	at := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	ps := proposals.New(g.store, func() time.Time { at = at.Add(time.Second); return at }, "", nil)
	create := func(tenant, id string) {
		t.Helper()
		if _, err := ps.Create(lifecycle.WithTenant(context.Background(), tenant), lifecycle.ActorMastra, lifecycle.Proposal{ID: id, RunID: "run_1",
			AgentSlug: "quick", ContentKey: "agents/quick/runs/run_1/output/" + id + ".json", TenantID: tenant}); err != nil {
			t.Fatal(err)
		}
	}
	create("acme", "prop_acme") // the oldest: last, newest first
	for i := range 250 {
		create("bolt", fmt.Sprintf("prop_bolt_%03d", i))
	}
	acme := client.Proposals{Client: &client.Client{BaseURL: g.srv.URL, HTTP: g.srv.Client(), Token: "tok-acme-gw"}}
	page, next, err := acme.Pending(context.Background(), client.Query{Limit: 50})
	if err != nil || len(page) != 0 || next == "" {
		t.Fatalf("acme's first page: %d proposals, next %q, %v; want none and a next cursor", len(page), next, err)
	}
	got, _, err := acme.Pending(context.Background(), client.Query{All: true})
	if err != nil || len(got) != 1 || got[0].ID != "prop_acme" {
		t.Fatalf("acme's pending proposals: %+v, %v; want prop_acme alone", got, err)
	}
}
