package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/storage"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/proposals"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The tenants' tokens, beside the rig's (which act for the default tenant).
var tenantTokens = map[string]lifecycle.Actor{
	"tok-acme-gw": "gateway@acme", "tok-acme-admin": "admin@acme",
	"tok-bolt-gw": "gateway@bolt", "tok-bolt-admin": "admin@bolt",
	"tok-all-admin": "admin@*",
}

// TestTenantAttack makes every route of the server, with tenant acme's
// tokens, try tenant bolt's runs, jobs and inbox entries: each id answers
// 404 as one that does not exist, each list leaves bolt's out, and bolt's
// idempotency key makes acme a run of its own. A route with no case here
// fails the test, so a new route must say how it keeps tenants apart.
func TestTenantAttack(t *testing.T) {
	t.Parallel()
	all := maps.Clone(tokens)
	maps.Copy(all, tenantTokens)
	late := &lateFeed{ready: make(chan *events.Feed, 1)}
	g := newRig(t, rigOpts{running: true, tokens: all, events: late})
	feed, err := events.New(events.Config{Store: g.store, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	late.ready <- feed
	fctx, stopFeed := context.WithCancel(context.Background())
	feedDone := make(chan struct{})
	go func() { _ = feed.Run(fctx); close(feedDone) }()
	defer func() { stopFeed(); <-feedDone }()
	ctx := context.Background()
	bolt := &client.Client{BaseURL: g.srv.URL, HTTP: g.srv.Client(), Token: "tok-bolt-gw"}

	// Bolt's records: a finished run, one at an approval gate, one
	// running, one waiting for an event; a job; an inbox entry.
	submit := func(agent, key string) string {
		t.Helper()
		hdr := map[string]string{}
		if key != "" {
			hdr["X-Idempotency-Key"] = key
		}
		code, _, body := g.raw("POST", "/agents/run", "tok-bolt-gw", "application/json", []byte(`{"agent_slug":"`+agent+`"}`), hdr)
		var res struct {
			RunID string `json:"run_id"`
		}
		if code != http.StatusCreated || json.Unmarshal(body, &res) != nil {
			t.Fatalf("bolt submit %s: %d %s", agent, code, body)
		}
		return res.RunID
	}
	quick, gate, slow, ext := submit("quick", "k-1"), submit("gate", ""), submit("slow", ""), submit("ext", "")
	for _, id := range []string{quick, gate, ext} {
		g.waitStatus(id)
	}
	if st, err := bolt.Status(ctx, quick); err != nil || st.Status != string(machine.RunCompleted) || st.TenantID != "bolt" {
		t.Fatalf("bolt reads its run: %+v, %v", st, err)
	}
	job, err := bolt.Enqueue(ctx, lifecycle.NewJob{RunID: quick, JobType: lifecycle.JobBrief, AgentSlug: "quick"})
	if err != nil || job.TenantID != "bolt" {
		t.Fatalf("bolt enqueue: %+v, %v", job, err)
	}
	inboxBody := `{"source":{"type":"ui","identity":"u"},"intent":{"action":"research","target":"x"},"metadata":{"correlation_id":"c"}}`
	code, _, body := g.raw("POST", "/inbox/submit", "tok-bolt-gw", "application/json", []byte(inboxBody), nil)
	var entry struct {
		ID string `json:"inbox_id"`
	}
	if code != http.StatusCreated || json.Unmarshal(body, &entry) != nil || entry.ID == "" {
		t.Fatalf("bolt inbox submit: %d %s", code, body)
	}
	// A proposal of bolt's run, and an artifact of bolt's, as the runner
	// and a worker write them.
	boltCtx := lifecycle.WithTenant(ctx, "bolt")
	prop, err := proposals.New(g.store, time.Now, "test", nil).Create(boltCtx, lifecycle.ActorMastra, lifecycle.Proposal{
		ID: "prop_bolt", RunID: quick, AgentSlug: "quick", ContentKey: "agents/quick/runs/" + quick + "/output/x.md", TenantID: "bolt"})
	if err != nil {
		t.Fatal(err)
	}
	artKey, err := layout.ArtifactKey(lifecycle.DefaultProject, "art-bolt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.store.Put(ctx, artKey, []byte(`{"version":1,"artifact_id":"art-bolt","job_id":"`+job.JobID+`","type":"BRIEF","agent_slug":"quick","created_at":"2026-11-28T09:00:00Z","finalized":true,"content":{},"tenant_id":"bolt"}`), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	if code, _, body := g.raw("GET", "/artifacts/art-bolt", "tok-bolt-admin", "", nil, nil); code != http.StatusOK {
		t.Fatalf("bolt reads its artifact: %d %s", code, body)
	}
	if code, _, body := g.raw("GET", "/proposals/"+prop.ID, "tok-bolt-gw", "", nil, nil); code != http.StatusOK {
		t.Fatalf("bolt reads its proposal: %d %s", code, body)
	}
	// A run of bolt's about a repository, as a webhook starts one: listed
	// by GET /runs?repo= to bolt.
	repoRun, err := g.runner.Submit(boltCtx, lifecycle.SubmitRequest{AgentSlug: "quick", Trigger: "event", RepoID: "octo/repo"})
	if err != nil {
		t.Fatal(err)
	}
	if runs, _, err := bolt.Runs(ctx, client.Query{Repo: "octo/repo"}); err != nil || len(runs) != 1 || runs[0].RunID != repoRun.RunID {
		t.Fatalf("bolt lists its repository's runs: %+v, %v", runs, err)
	}
	boltIDs := []string{quick, gate, slow, ext, repoRun.RunID, job.JobID, entry.ID, prop.ID, "art-bolt"}

	// notFound: acme's request answers 404 and the same body as for an id
	// that does not exist (the id swapped), so nothing tells them apart.
	notFound := func(method, path, token, body, id string) func(t *testing.T) {
		return func(t *testing.T) {
			code, _, got := g.raw(method, strings.ReplaceAll(path, "{id}", id), token, "application/json", []byte(body), nil)
			const ghost = "nobody-has-this-id"
			_, _, want := g.raw(method, strings.ReplaceAll(path, "{id}", ghost), token, "application/json", []byte(body), nil)
			if code != http.StatusNotFound {
				t.Fatalf("%s %s as %s: %d %s, want 404", method, path, token, code, got)
			}
			if w := strings.ReplaceAll(string(want), ghost, id); !sameError(t, string(got), w) {
				t.Errorf("%s %s: another tenant's id answers %s, a missing one %s", method, path, got, w)
			}
		}
	}
	// leavesOut: acme's answer holds none of bolt's ids.
	leavesOut := func(method, path, token, body string, status int) func(t *testing.T) {
		return func(t *testing.T) {
			code, _, got := g.raw(method, path, token, "application/json", []byte(body), nil)
			if code != status {
				t.Fatalf("%s %s as %s: %d %s, want %d", method, path, token, code, got, status)
			}
			for _, id := range boltIDs {
				if strings.Contains(string(got), id) {
					t.Errorf("%s %s as %s shows bolt's %s: %s", method, path, token, id, got)
				}
			}
		}
	}
	// operator: a view over every tenant, 404 to a tenant's token (even
	// one whose actor the route refuses: 404 comes before 403).
	operator := func(method, path, body string) func(t *testing.T) {
		return func(t *testing.T) {
			for _, tok := range []string{"tok-acme-admin", "tok-acme-gw"} {
				code, _, got := g.raw(method, path, tok, "application/json", []byte(body), nil)
				if code != http.StatusNotFound {
					t.Errorf("%s %s as %s: %d %s, want 404", method, path, tok, code, got)
				}
			}
		}
	}
	const gw, admin = "tok-acme-gw", "tok-acme-admin"
	// confined: a view of acme's own records, whatever ?tenant= says:
	// 200, nothing of bolt's (its ids, its rows), and the same answer with
	// ?tenant=bolt as without (counts carry neither ids nor names: only
	// the comparison catches bolt's numbers). Compared twice before
	// failing: an hour's bucket may turn between two reads.
	confined := func(path string) func(t *testing.T) {
		return func(t *testing.T) {
			for _, q := range []string{"", "?tenant=bolt"} {
				leavesOut("GET", path+q, admin, "", 200)(t)
				if _, _, got := g.raw("GET", path+q, gw, "", nil, nil); strings.Contains(string(got), `"bolt"`) {
					t.Errorf("GET %s%s as acme shows bolt: %s", path, q, got)
				}
			}
			for try := 0; ; try++ {
				_, _, own := g.raw("GET", path, admin, "", nil, nil)
				_, _, asked := g.raw("GET", path+"?tenant=bolt", admin, "", nil, nil)
				if bytes.Equal(withoutAsOf(t, own), withoutAsOf(t, asked)) {
					break
				}
				if try == 1 {
					t.Errorf("GET %s?tenant=bolt as acme's admin = %s, want acme's own %s", path, asked, own)
					break
				}
			}
		}
	}
	cases := map[string]func(t *testing.T){
		"POST /agents/run": func(t *testing.T) {
			// Bolt's key, sent by acme, is acme's own: a new run, not bolt's.
			code, _, got := g.raw("POST", "/agents/run", gw, "application/json", []byte(`{"agent_slug":"quick"}`), map[string]string{"X-Idempotency-Key": "k-1"})
			if code != http.StatusCreated || strings.Contains(string(got), quick) {
				t.Fatalf("acme submit with bolt's key: %d %s, want 201 and a run of its own", code, got)
			}
		},
		"GET /agents": leavesOut("GET", "/agents", gw, "", 200), // the agents are code, every tenant's
		"GET /runs": func(t *testing.T) {
			leavesOut("GET", "/runs", gw, "", 200)(t)
			leavesOut("GET", "/runs?status=completed", admin, "", 200)(t)
			leavesOut("GET", "/runs?repo=octo/repo", gw, "", 200)(t)
		},
		"GET /runs/{runId}/status":   notFound("GET", "/runs/{id}/status", gw, "", quick),
		"GET /runs/{runId}/steps":    notFound("GET", "/runs/{id}/steps", gw, "", quick),
		"GET /runs/{runId}/input":    notFound("GET", "/runs/{id}/input", gw, "", quick),
		"POST /runs/{runId}/cancel":  notFound("POST", "/runs/{id}/cancel", gw, `{}`, slow),
		"POST /runs/{runId}/approve": notFound("POST", "/runs/{id}/approve", gw, `{}`, gate),
		"POST /runs/{runId}/reject":  notFound("POST", "/runs/{id}/reject", gw, `{}`, gate),
		"POST /runs/{runId}/events":  notFound("POST", "/runs/{id}/events", gw, `{"type":"reply","id":"e1"}`, ext),
		"POST /jobs": func(t *testing.T) {
			// A job acme creates is acme's.
			code, _, got := g.raw("POST", "/jobs", gw, "application/json", []byte(`{"run_id":"r","job_type":"BRIEF","agent_slug":"quick"}`), nil)
			if code != http.StatusCreated || !strings.Contains(string(got), `"tenant_id":"acme"`) {
				t.Fatalf("acme enqueue: %d %s", code, got)
			}
			// An id of its own choosing could meet another tenant's: refused,
			// as is a batch naming one.
			for path, body := range map[string]string{
				"/jobs":       `{"job_id":"` + job.JobID + `","run_id":"r","job_type":"BRIEF","agent_slug":"quick"}`,
				"/jobs/batch": `{"jobs":[{"job_id":"` + job.JobID + `","run_id":"r","job_type":"BRIEF","agent_slug":"quick"}]}`,
			} {
				if code, _, got := g.raw("POST", path, gw, "application/json", []byte(body), nil); code != http.StatusBadRequest {
					t.Errorf("acme enqueues at bolt's id through %s: %d %s, want 400", path, code, got)
				}
			}
		},
		"POST /jobs/batch":            leavesOut("POST", "/jobs/batch", gw, `{"jobs":[{"run_id":"r","job_type":"BRIEF","agent_slug":"quick"}]}`, 201),
		"GET /jobs":                   leavesOut("GET", "/jobs", admin, "", 200),
		"GET /jobs/{jobId}":           notFound("GET", "/jobs/{id}", admin, "", job.JobID),
		"GET /jobs/{jobId}/history":   notFound("GET", "/jobs/{id}/history", admin, "", job.JobID),
		"POST /jobs/{jobId}/requeue":  notFound("POST", "/jobs/{id}/requeue", admin, "", job.JobID),
		"POST /jobs/{jobId}/cancel":   notFound("POST", "/jobs/{id}/cancel", admin, "", job.JobID),
		"POST /jobs/requeue":          leavesOut("POST", "/jobs/requeue", admin, `{}`, 200),
		"POST /jobs/cancel":           leavesOut("POST", "/jobs/cancel", admin, `{}`, 200),
		"GET /stats/jobs/counts":      confined("/stats/jobs/counts"),
		"GET /stats/jobs/activity":    confined("/stats/jobs/activity"),
		"GET /queues":                 operator("GET", "/queues", ""),
		"POST /queues/{queue}/pause":  operator("POST", "/queues/quick/pause", ""),
		"POST /queues/{queue}/resume": operator("POST", "/queues/quick/resume", ""),
		"POST /inbox/submit": func(t *testing.T) {
			leavesOut("POST", "/inbox/submit", gw, inboxBody, 201)(t)
			// An id of its own choosing could meet another tenant's: refused.
			code, _, got := g.raw("POST", "/inbox/submit", gw, "application/json", []byte(`{"id":"`+entry.ID+`",`+inboxBody[1:]), nil)
			if code != http.StatusBadRequest {
				t.Errorf("acme submits an entry with bolt's id: %d %s, want 400", code, got)
			}
		},
		"GET /inbox/stats": func(t *testing.T) {
			// Bolt's counts are its one entry's, whatever acme submits.
			code, _, got := g.raw("GET", "/inbox/stats", "tok-bolt-gw", "", nil, nil)
			var st lifecycle.InboxStats
			if code != http.StatusOK || json.Unmarshal(got, &st) != nil || st.Total != 1 {
				t.Errorf("bolt's inbox stats: %d %s, want a total of 1", code, got)
			}
		},
		"GET /inbox/entries":                    leavesOut("GET", "/inbox/entries", gw, "", 200),
		"GET /schedules":                        operator("GET", "/schedules", ""),
		"POST /schedules/{scheduleId}/pause":    operator("POST", "/schedules/nightly/pause", ""),
		"POST /schedules/{scheduleId}/resume":   operator("POST", "/schedules/nightly/resume", ""),
		"GET /quarantine":                       operator("GET", "/quarantine", ""),
		"POST /quarantine/restore":              operator("POST", "/quarantine/restore", `{}`),
		"POST /nlm/callback":                    operator("POST", "/nlm/callback", `{}`),
		"GET /events/stream":                    func(t *testing.T) { streamLeavesOut(t, g, boltIDs) },
		"GET /metrics":                          operator("GET", "/metrics", ""),
		"POST /jobs/process":                    operator("POST", "/jobs/process", `{}`),
		"GET /nlm/jobs/{jobId}":                 operator("GET", "/nlm/jobs/nlm-1", ""),
		"GET /artifacts/{artifactId}":           notFound("GET", "/artifacts/{id}", admin, "", "art-bolt"),
		"GET /jobs/{jobId}/artifact":            notFound("GET", "/jobs/{id}/artifact", admin, "", job.JobID),
		"GET /proposals/pending":                leavesOut("GET", "/proposals/pending", gw, "", 200),
		"GET /proposals/{proposalId}":           notFound("GET", "/proposals/{id}", gw, "", prop.ID),
		"POST /proposals/{proposalId}/decision": notFound("POST", "/proposals/{id}/decision", gw, `{"status":"applied"}`, prop.ID),
		"GET /healthz":                          leavesOut("GET", "/healthz", "", "", 200),
	}
	for _, rt := range httpapi.Routes(g.server) {
		p := rt[0] + " " + rt[1]
		check, ok := cases[p]
		if !ok {
			t.Errorf("route %s has no tenant case: say how it keeps tenants apart", p)
			continue
		}
		t.Run(p, check)
	}
	// Bolt still sees its own (as stored: a tenant_id lost on the way
	// would read as the default tenant's, and 404), and an operator of
	// every tenant sees both.
	for path, want := range map[string]string{"/jobs/" + job.JobID: `"tenant_id":"bolt"`, "/inbox/entries": `"tenant_id":"bolt"`} {
		if code, _, body := g.raw("GET", path, "tok-bolt-admin", "", nil, nil); code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("bolt reads %s: %d %s, want %s", path, code, body, want)
		}
	}
	if _, err := bolt.Status(ctx, gate); err != nil {
		t.Errorf("bolt reads its gate run: %v", err)
	}
	if code, _, body := g.raw("GET", "/runs/"+gate+"/status", "tok-all-admin", "", nil, nil); code != http.StatusOK {
		t.Errorf("admin@* reads bolt's run: %d %s", code, body)
	}
	if code, _, body := g.raw("GET", "/runs/"+gate+"/status", "tok-gateway", "", nil, nil); code != http.StatusNotFound {
		t.Errorf("the default tenant reads bolt's run: %d %s", code, body)
	}
	// admin@* lists one tenant's runs through the Go client; a token of
	// one tenant lists its own whatever it asks.
	everyTenant := &client.Client{BaseURL: g.srv.URL, HTTP: g.srv.Client(), Token: "tok-all-admin"}
	if runs, _, err := everyTenant.Runs(ctx, client.Query{Tenant: "bolt", All: true}); err != nil || !slices.ContainsFunc(runs, func(r lifecycle.RunStatus) bool { return r.RunID == gate }) {
		t.Errorf("admin@* lists bolt's runs: %d runs, %v", len(runs), err)
	}
	acme := &client.Client{BaseURL: g.srv.URL, HTTP: g.srv.Client(), Token: "tok-acme-gw"}
	if runs, _, err := acme.Runs(ctx, client.Query{Tenant: "bolt", All: true}); err != nil || slices.ContainsFunc(runs, func(r lifecycle.RunStatus) bool { return r.TenantID == "bolt" }) {
		t.Errorf("acme asking for bolt's runs got them: %d runs, %v", len(runs), err)
	}
	// Every answer names the token's tenant, for the page to show.
	for tok, want := range map[string]string{"tok-acme-gw": "acme", "tok-all-admin": "*", "tok-gateway": ""} {
		if _, h, _ := g.raw("GET", "/agents", tok, "", nil, nil); h.Get("X-Conveyor-Tenant") != want {
			t.Errorf("%s: X-Conveyor-Tenant %q, want %q", tok, h.Get("X-Conveyor-Tenant"), want)
		}
	}
}

// sameError tells whether two JSON error bodies say the same, their
// request ids aside.
func sameError(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y map[string]any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	for _, m := range []map[string]any{x, y} {
		delete(m, "request_id")
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// streamLeavesOut opens the event stream as acme, then has bolt and acme
// each submit a run: acme's run comes through to its end, and nothing of
// bolt's (its records from before, and its new run) on the way.
func streamLeavesOut(t *testing.T, g *rig, boltIDs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", g.srv.URL+"/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok-acme-gw")
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream as acme: %d", resp.StatusCode)
	}
	sub := func(token string) string {
		code, _, body := g.raw("POST", "/agents/run", token, "application/json", []byte(`{"agent_slug":"quick"}`), nil)
		var res struct {
			RunID string `json:"run_id"`
		}
		if code != http.StatusCreated || json.Unmarshal(body, &res) != nil {
			t.Fatalf("submit as %s: %d %s", token, code, body)
		}
		return res.RunID
	}
	boltIDs = append(boltIDs, sub("tok-bolt-gw"))
	mine := sub("tok-acme-gw")
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, id := range boltIDs {
			if strings.Contains(line, id) {
				t.Fatalf("acme's stream shows bolt's %s: %s", id, line)
			}
		}
		if strings.Contains(line, mine) && strings.Contains(line, `"completed"`) {
			return
		}
	}
	t.Fatalf("acme's stream ended before its run completed: %v", sc.Err())
}

// withoutAsOf is a JSON object's body without its "as_of" (the time it
// was read), for comparing two reads of one view.
func withoutAsOf(t *testing.T, body []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	delete(m, "as_of")
	out, _ := json.Marshal(m)
	return out
}
