package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestBadInputWritesNothing sends every kind of bad request and asserts its
// status and code, and that the store, audit log included, is byte for byte
// what it was.
func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{}) // the Runner's loop is not running: nothing moves on its own
	ctx := context.Background()
	quick, err := g.runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"})
	if err != nil {
		t.Fatal(err)
	}
	gate, err := g.runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "gate"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.queue.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: "job-1", RunID: quick.RunID, JobType: lifecycle.JobBrief, AgentSlug: "quick"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.box.Submit(ctx, lifecycle.ActorGateway, lifecycle.InboxSubmission{ID: "entry-1", Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
		Intent: lifecycle.InboxIntent{Action: "research", Target: "violins"}}); err != nil {
		t.Fatal(err)
	}

	const js = "application/json"
	gw, admin := "tok-gateway", "tok-admin"
	long := strings.Repeat("x", 200)
	huge := `{"agent_slug":"quick","input":"` + strings.Repeat("a", 1<<20) + `"}`
	tests := []struct {
		name         string
		method, path string
		token, ctype string
		body         string
		header       map[string]string
		status       int
		code         string
		allow        string
	}{
		{name: "malformed JSON", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":`, status: 400, code: "INVALID_REQUEST"},
		{name: "not an object", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `[1]`, status: 400, code: "INVALID_REQUEST"},
		{name: "unknown field", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":"quick","bogus":1}`, status: 400, code: "INVALID_REQUEST"},
		{name: "trailing data", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":"quick"} {}`, status: 400, code: "INVALID_REQUEST"},
		{name: "trailing garbage", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":"quick"}x`, status: 400, code: "INVALID_REQUEST"},
		{name: "empty body", method: "POST", path: "/agents/run", token: gw, ctype: js, body: ``, status: 400, code: "INVALID_REQUEST"},
		{name: "missing agent_slug", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"trigger":"manual"}`, status: 400, code: "INVALID_REQUEST"},
		{name: "metadata not strings", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":"quick","metadata":{"a":1}}`, status: 400, code: "INVALID_REQUEST"},
		{name: "bad trigger", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":"quick","trigger":"sometimes"}`, status: 400, code: "INVALID_REQUEST"},
		{name: "oversized body", method: "POST", path: "/agents/run", token: gw, ctype: js, body: huge, status: 413, code: "INPUT_TOO_LARGE"},
		{name: "idempotency key too long", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":"quick"}`,
			header: map[string]string{"X-Idempotency-Key": strings.Repeat("k", 600)}, status: 413, code: "INPUT_TOO_LARGE"},
		{name: "idempotency key with a space", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":"quick"}`,
			header: map[string]string{"X-Idempotency-Key": "req 1"}, status: 400, code: "INVALID_REQUEST"},
		{name: "idempotency key with an empty request id", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":"quick"}`,
			header: map[string]string{"X-Idempotency-Key": "api:gateway:"}, status: 400, code: "INVALID_REQUEST"},
		{name: "wrong content type", method: "POST", path: "/agents/run", token: gw, ctype: "text/plain", body: `{"agent_slug":"quick"}`, status: 415, code: "UNSUPPORTED_MEDIA_TYPE"},
		{name: "no content type", method: "POST", path: "/agents/run", token: gw, body: `{"agent_slug":"quick"}`, status: 415, code: "UNSUPPORTED_MEDIA_TYPE"},
		{name: "other charset", method: "POST", path: "/agents/run", token: gw, ctype: "application/json; charset=latin1", body: `{"agent_slug":"quick"}`, status: 415, code: "UNSUPPORTED_MEDIA_TYPE"},
		{name: "wrong method", method: "DELETE", path: "/agents/run", token: gw, status: 405, code: "METHOD_NOT_ALLOWED", allow: "POST"},
		{name: "wrong method on a run", method: "PUT", path: "/runs/" + quick.RunID + "/status", token: gw, status: 405, code: "METHOD_NOT_ALLOWED", allow: "GET, HEAD"},
		{name: "unknown route", method: "GET", path: "/nope", token: gw, status: 404, code: "NOT_FOUND"},
		{name: "bad run id", method: "GET", path: "/runs/..%2Fx/status", token: gw, status: 400, code: "INVALID_INPUT"},
		{name: "over-long run id", method: "GET", path: "/runs/" + long + "/steps", token: gw, status: 400, code: "INVALID_INPUT"},
		{name: "bad job id", method: "GET", path: "/jobs/..%2Fjobs", token: gw, status: 400, code: "INVALID_INPUT"},
		{name: "bad agent", method: "GET", path: "/runs?agent=..%2Fx", token: gw, status: 400, code: "INVALID_INPUT"},
		{name: "bad agent slug in a body", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":"../x"}`, status: 400, code: "INVALID_INPUT"},
		{name: "runs with a bad limit", method: "GET", path: "/runs?limit=-1", token: gw, status: 400, code: "INVALID_REQUEST"},
		{name: "runs of a repository no key can hold", method: "GET", path: "/runs?repo=octo/..x", token: gw, status: 400, code: "INVALID_REQUEST"},
		{name: "runs with a bad cursor", method: "GET", path: "/runs?agent=quick&cursor=x", token: gw, status: 400, code: "INVALID_CURSOR"},
		{name: "missing token", method: "GET", path: "/runs/" + quick.RunID + "/status", status: 401, code: "UNAUTHORIZED"},
		{name: "unknown token", method: "GET", path: "/runs/" + quick.RunID + "/status", token: "tok-nope", status: 401, code: "UNAUTHORIZED"},
		{name: "missing token on a write", method: "POST", path: "/agents/run", ctype: js, body: `{"agent_slug":"quick"}`, status: 401, code: "UNAUTHORIZED"},
		{name: "frontend submits", method: "POST", path: "/agents/run", token: "tok-frontend", ctype: js, body: `{"agent_slug":"quick"}`, status: 403, code: "FORBIDDEN"},
		{name: "nlm backend submits", method: "POST", path: "/agents/run", token: "tok-nlm", ctype: js, body: `{"agent_slug":"quick"}`, status: 403, code: "FORBIDDEN"},
		{name: "gateway requeues", method: "POST", path: "/jobs/job-1/requeue", token: gw, status: 403, code: "FORBIDDEN"},
		{name: "frontend enqueues", method: "POST", path: "/jobs", token: "tok-frontend", ctype: js, body: `{"run_id":"r","job_type":"BRIEF","agent_slug":"quick"}`, status: 403, code: "FORBIDDEN"},
		{name: "frontend approves", method: "POST", path: "/runs/" + gate.RunID + "/approve", token: "tok-frontend", ctype: js, body: `{}`, status: 403, code: "FORBIDDEN"},
		{name: "gateway lists quarantine", method: "GET", path: "/quarantine", token: gw, status: 403, code: "FORBIDDEN"},
		{name: "gateway posts a callback", method: "POST", path: "/nlm/callback", token: gw, ctype: js, body: `{"job_id":"job-1","status":"COMPLETE"}`, status: 403, code: "FORBIDDEN"},
		{name: "unknown run", method: "GET", path: "/runs/run-nope/status", token: gw, status: 404, code: "RUN_NOT_FOUND"},
		{name: "unknown run's steps", method: "GET", path: "/runs/run-nope/steps", token: gw, status: 404, code: "RUN_NOT_FOUND"},
		{name: "cancel an unknown run", method: "POST", path: "/runs/run-nope/cancel", token: gw, ctype: js, body: `{}`, status: 404, code: "RUN_NOT_FOUND"},
		{name: "unknown job", method: "GET", path: "/jobs/job-nope", token: gw, status: 404, code: "JOB_NOT_FOUND"},
		{name: "requeue an unknown job", method: "POST", path: "/jobs/job-nope/requeue", token: admin, status: 404, code: "JOB_NOT_FOUND"},
		{name: "unknown agent", method: "POST", path: "/agents/run", token: gw, ctype: js, body: `{"agent_slug":"nope"}`, status: 404, code: "AGENT_NOT_FOUND"},
		{name: "unknown agent's runs", method: "GET", path: "/runs?agent=nope", token: gw, status: 404, code: "AGENT_NOT_FOUND"},
		{name: "unknown NLM job", method: "POST", path: "/nlm/callback", token: "tok-nlm", ctype: js, body: `{"job_id":"nlm-nope","status":"COMPLETE","artifact_id":"a"}`, status: 404, code: "JOB_NOT_FOUND"},
		{name: "approve a run that is not waiting", method: "POST", path: "/runs/" + gate.RunID + "/approve", token: gw, ctype: js, body: `{"decided_by":"owner"}`, status: 409, code: "RUN_INVALID_TRANSITION"},
		{name: "deliver to a run that is not waiting", method: "POST", path: "/runs/" + gate.RunID + "/events", token: gw, ctype: js, body: `{"type":"reply"}`, status: 409, code: "RUN_INVALID_TRANSITION"},
		{name: "cancel on the canonical machine", method: "POST", path: "/runs/" + quick.RunID + "/cancel", token: gw, ctype: js, body: `{"reason":"no"}`, status: 409, code: "RUN_UNSUPPORTED_OPERATION"},
		{name: "requeue a queued job", method: "POST", path: "/jobs/job-1/requeue", token: admin, status: 409, code: "RUN_INVALID_TRANSITION"},
		{name: "requeue with a body", method: "POST", path: "/jobs/job-1/requeue", token: admin, ctype: js, body: `{}`, status: 400, code: "INVALID_REQUEST"},
		{name: "reason not clean text", method: "POST", path: "/runs/" + gate.RunID + "/reject", token: gw, ctype: js, body: `{"reason":"a\u0000b"}`, status: 400, code: "INVALID_INPUT"},
		{name: "event without a type", method: "POST", path: "/runs/" + gate.RunID + "/events", token: gw, ctype: js, body: `{"id":"e1"}`, status: 400, code: "INVALID_REQUEST"},
		{name: "job without fields", method: "POST", path: "/jobs", token: gw, ctype: js, body: `{}`, status: 400, code: "INVALID_REQUEST"},
		{name: "job with a bad id", method: "POST", path: "/jobs", token: gw, ctype: js, body: `{"job_id":"../j","run_id":"r","job_type":"BRIEF","agent_slug":"quick"}`, status: 400, code: "INVALID_INPUT"},
		{name: "job that exists", method: "POST", path: "/jobs", token: gw, ctype: js, body: `{"job_id":"job-1","run_id":"r","job_type":"BRIEF","agent_slug":"quick"}`, status: 409, code: "JOB_EXISTS"},
		{name: "inbox entry of an unknown source", method: "POST", path: "/inbox/submit", token: gw, ctype: js,
			body: `{"source":{"type":"fax","identity":"owner"},"intent":{"action":"research","target":"x"},"metadata":{}}`, status: 400, code: "INVALID_REQUEST"},
		{name: "inbox entry that exists", method: "POST", path: "/inbox/submit", token: gw, ctype: js,
			body: `{"id":"entry-1","source":{"type":"ui","identity":"owner"},"intent":{"action":"research","target":"x"},"metadata":{}}`, status: 409, code: "INBOX_ENTRY_EXISTS"},
		{name: "frontend submits an inbox entry", method: "POST", path: "/inbox/submit", token: "tok-frontend", ctype: js,
			body: `{"source":{"type":"ui","identity":"owner"},"intent":{"action":"research","target":"x"},"metadata":{}}`, status: 403, code: "FORBIDDEN"},
		{name: "inbox entries of an unknown status", method: "GET", path: "/inbox/entries?status=lost", token: gw, status: 400, code: "INVALID_REQUEST"},
		{name: "inbox entries, include_expired neither true nor false", method: "GET", path: "/inbox/entries?include_expired=maybe", token: gw, status: 400, code: "INVALID_REQUEST"},
		{name: "restore a key outside quarantine", method: "POST", path: "/quarantine/restore", token: admin, ctype: js, body: `{"qkey":"jobs/job-1.json"}`, status: 400, code: "INVALID_INPUT"},
		{name: "restore an unknown record", method: "POST", path: "/quarantine/restore", token: admin, ctype: js, body: `{"qkey":"quarantine/nope.json"}`, status: 404, code: "NOT_FOUND"},
		{name: "no event feed", method: "GET", path: "/events/stream", token: gw, status: 503, code: "SERVICE_UNAVAILABLE"},
		{name: "no metrics", method: "GET", path: "/metrics", token: gw, status: 404, code: "NOT_FOUND"},
	}
	before := g.snapshot()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, header, body := g.raw(tt.method, tt.path, tt.token, tt.ctype, []byte(tt.body), tt.header)
			var e struct {
				Code    string   `json:"code"`
				Message string   `json:"message"`
				Allowed []string `json:"allowed"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d %q: not the JSON error form: %v", status, body, err)
			}
			if status != tt.status || e.Code != tt.code {
				t.Errorf("answer %d %s (%s), want %d %s", status, e.Code, e.Message, tt.status, tt.code)
			}
			if e.Message == "" {
				t.Error("no message")
			}
			if ct := header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if tt.allow != "" && header.Get("Allow") != tt.allow {
				t.Errorf("Allow %q, want %q", header.Get("Allow"), tt.allow)
			}
			if d := diffSnapshots(before, g.snapshot()); d != "" {
				t.Errorf("the store changed:\n%s", d)
			}
		})
	}
}

// TestInvalidTransitionBody: a refused move's 409 names the move and the
// states reachable from its start.
func TestInvalidTransitionBody(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	res, err := g.runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "gate"})
	if err != nil {
		t.Fatal(err)
	}
	before := g.snapshot()
	_, err = g.client(lifecycle.ActorGateway).Decide(ctx, res.RunID, true, "owner", "ship it", nil)
	e := apiError(t, err, http.StatusConflict, codes.InvalidTransition)
	if e.From != string(machine.ApprovalPending) || e.To != string(machine.ApprovalRunning) || len(e.Allowed) == 0 {
		t.Errorf("from %q to %q allowed %q, want pending → running and the states reachable from pending", e.From, e.To, e.Allowed)
	}
	for _, s := range e.Allowed {
		if !machine.ApprovalRun().Allowed(machine.ApprovalPending, machine.ApprovalRunState(s)) {
			t.Errorf("allowed lists %s, which pending cannot reach", s)
		}
	}
	if !errorsIs(err, lifecycle.ErrInvalidTransition) {
		t.Error("the error does not match lifecycle.ErrInvalidTransition")
	}
	if d := diffSnapshots(before, g.snapshot()); d != "" {
		t.Errorf("the store changed:\n%s", d)
	}
}

// TestInvalidUTF8WritesNothing sends invalid UTF-8 and lone surrogate
// escapes in every free-text field and map key of every route with a body:
// each is 400 INVALID_INPUT and the store, audit log included, is byte for
// byte what it was (issue 18: encoding/json replaced the bytes with U+FFFD,
// so the SDK's checks saw clean text and the run was stored).
func TestInvalidUTF8WritesNothing(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	gate, err := g.runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "gate"})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := g.runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	const bad, surrogate = "\xc3\x28", `\ud800`
	gw, admin, nlmTok := "tok-gateway", "tok-admin", "tok-nlm"
	type route struct{ path, token string }
	runs := route{"/agents/run", gw}
	cancel := route{"/runs/" + slow.RunID + "/cancel", gw}
	approve := route{"/runs/" + gate.RunID + "/approve", gw}
	reject := route{"/runs/" + gate.RunID + "/reject", gw}
	events := route{"/runs/" + gate.RunID + "/events", gw}
	jobs := route{"/jobs", gw}
	callback := route{"/nlm/callback", nlmTok}
	inboxSubmit := route{"/inbox/submit", gw}
	restore := route{"/quarantine/restore", admin}
	inboxBody := func(identity, target, corr string) string {
		return `{"source":{"type":"ui","identity":"` + identity + `"},"intent":{"action":"research","target":"` + target + `"},"metadata":{"correlation_id":"` + corr + `"}}`
	}
	tests := []struct {
		name string
		route
		body string
	}{
		{"submit user_id", runs, `{"agent_slug":"quick","user_id":"` + bad + `"}`},
		{"submit metadata key", runs, `{"agent_slug":"quick","metadata":{"` + bad + `":"v"}}`},
		{"submit metadata value", runs, `{"agent_slug":"quick","metadata":{"k":"` + bad + `"}}`},
		{"submit input string", runs, `{"agent_slug":"quick","input":{"q":"` + bad + `"}}`},
		{"submit input key", runs, `{"agent_slug":"quick","input":{"` + bad + `":1}}`},
		{"submit trigger", runs, `{"agent_slug":"quick","trigger":"` + bad + `"}`},
		{"submit agent_slug", runs, `{"agent_slug":"` + bad + `"}`},
		{"submit unknown field name", runs, `{"agent_slug":"quick","` + bad + `":1}`},
		{"submit user_id surrogate", runs, `{"agent_slug":"quick","user_id":"` + surrogate + `"}`},
		{"submit metadata key surrogate", runs, `{"agent_slug":"quick","metadata":{"` + surrogate + `":"v"}}`},
		{"cancel reason", cancel, "{\"reason\":\"\xff\xfe\"}"},
		{"cancel reason surrogate", cancel, `{"reason":"\udfff"}`},
		{"approve reason", approve, `{"reason":"` + bad + `"}`},
		{"approve decided_by", approve, `{"decided_by":"` + bad + `"}`},
		{"reject reason", reject, `{"reason":"` + bad + `"}`},
		{"reject decided_by surrogate", reject, `{"decided_by":"` + surrogate + `x"}`},
		{"event type", events, `{"type":"` + bad + `"}`},
		{"event id", events, `{"type":"reply","id":"` + bad + `"}`},
		{"event source", events, `{"type":"reply","source":"` + surrogate + `"}`},
		{"job payload", jobs, `{"run_id":"r","job_type":"BRIEF","agent_slug":"quick","payload":{"q":"` + bad + `"}}`},
		{"job payload key", jobs, `{"run_id":"r","job_type":"BRIEF","agent_slug":"quick","payload":{"` + bad + `":1}}`},
		{"job type", jobs, `{"run_id":"r","job_type":"` + bad + `","agent_slug":"quick"}`},
		{"job callback", jobs, `{"run_id":"r","job_type":"BRIEF","agent_slug":"quick","callback":"https://x/` + bad + `"}`},
		{"job entity ref", jobs, `{"run_id":"r","job_type":"BRIEF","agent_slug":"quick","context":{"entity_refs":["` + bad + `"]}}`},
		{"job payload surrogate", jobs, `{"run_id":"r","job_type":"BRIEF","agent_slug":"quick","payload":"` + surrogate + `"}`},
		{"callback error", callback, `{"job_id":"nlm-1","status":"ERROR","error":"` + bad + `"}`},
		{"inbox identity", inboxSubmit, inboxBody(bad, "x", "")},
		{"inbox target", inboxSubmit, inboxBody("owner", bad, "")},
		{"inbox correlation id", inboxSubmit, inboxBody("owner", "x", surrogate)},
		{"restore qkey", restore, `{"qkey":"quarantine/` + bad + `.json"}`},
	}
	before := g.snapshot()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := g.raw("POST", tt.path, tt.token, "application/json", []byte(tt.body), nil)
			var e struct{ Code, Message string }
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d %q: not the JSON error form: %v", status, body, err)
			}
			if status != http.StatusBadRequest || e.Code != codes.InvalidInput {
				t.Errorf("answer %d %s (%s), want 400 INVALID_INPUT", status, e.Code, e.Message)
			}
			if d := diffSnapshots(before, g.snapshot()); d != "" {
				t.Errorf("the store changed:\n%s", d)
			}
		})
	}
}
