package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/httpapi/internal/page"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

func TestRunRoutes(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{running: true})
	ctx := context.Background()
	c := g.client(lifecycle.ActorGateway)

	res, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick", Input: json.RawMessage(`{"q":1}`),
		Caller: lifecycle.Caller{UserID: "u-1", Metadata: map[string]string{"via": "test"}}})
	if err != nil || res.RunID == "" || res.Duplicate {
		t.Fatalf("Submit = %+v, %v", res, err)
	}
	g.waitStatus(res.RunID)
	st, err := c.Status(ctx, res.RunID)
	if err != nil || st.Status != string(machine.RunCompleted) || st.StepsCompleted != 2 || st.RunID != res.RunID {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	steps, err := c.Steps(ctx, res.RunID)
	if err != nil || len(steps) != 2 || steps[0].StepName != "load" || steps[1].Status != lifecycle.StepCompleted {
		t.Fatalf("Steps = %+v, %v", steps, err)
	}
	runs, _, err := c.Runs(ctx, client.Query{Agent: "quick", All: true})
	if err != nil || len(runs) != 1 || runs[0].RunID != res.RunID {
		t.Fatalf("Runs = %+v, %v", runs, err)
	}
	// A known agent without runs lists none.
	if runs, _, err := c.Runs(ctx, client.Query{Agent: "gate", All: true}); err != nil || runs == nil || len(runs) != 0 {
		t.Fatalf("Runs(gate) = %#v, %v", runs, err)
	}
	agents, err := g.client(lifecycle.ActorFrontend).Agents(ctx)
	if err != nil || len(agents) != 4 {
		t.Fatalf("Agents = %+v, %v", agents, err)
	}
	if a := agents[2]; a.Slug != "quick" || a.Machine != lifecycle.MachineCanonical || a.Spec.Name != lifecycle.MachineCanonical ||
		len(a.Steps) != 2 || a.Steps[1] != "write" || a.Concurrency != 1 {
		t.Errorf("agent %+v", a)
	}
	// Unknown run through the client: the SDK's sentinels match.
	_, err = c.Status(ctx, "run-nope")
	if !errors.Is(err, lifecycle.ErrRunNotFound) || !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Status(unknown) = %v, want run.ErrNotFound", err)
	}
	if err := c.Health(ctx); err != nil {
		t.Error(err)
	}
}

func TestApprovalRoutes(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{running: true})
	ctx := context.Background()
	c := g.client(lifecycle.ActorGateway)

	approved, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "gate"})
	if err != nil {
		t.Fatal(err)
	}
	if st := g.waitStatus(approved.RunID); st.Status != string(machine.ApprovalAwaitingApproval) {
		t.Fatalf("status %s, want awaiting_approval", st.Status)
	}
	st, err := c.Decide(ctx, approved.RunID, true, "", "looks good", nil)
	if err != nil || st.Status != string(machine.ApprovalRunning) || st.Approval == nil || st.Approval.DecidedBy != "gateway" {
		t.Fatalf("Approve = %+v, %v", st, err)
	}
	if st := g.waitStatus(approved.RunID); st.Status != string(machine.ApprovalCompleted) {
		t.Fatalf("status %s, want completed", st.Status)
	}

	rejected, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "gate"})
	if err != nil {
		t.Fatal(err)
	}
	g.waitStatus(rejected.RunID)
	st, err = c.Decide(ctx, rejected.RunID, false, "owner", "no", nil)
	if err != nil || st.Status != string(machine.ApprovalFailed) {
		t.Fatalf("Reject = %+v, %v", st, err)
	}
	// Terminal now: another decision is RUN_TERMINAL_STATE.
	_, err = c.Decide(ctx, rejected.RunID, true, "owner", "", nil)
	apiError(t, err, http.StatusConflict, codes.TerminalState)
	if !errors.Is(err, lifecycle.ErrTerminalState) || !errors.Is(err, lifecycle.ErrInvalidTransition) {
		t.Errorf("%v does not match ErrTerminalState", err)
	}

	waiting, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "ext"})
	if err != nil {
		t.Fatal(err)
	}
	if st := g.waitStatus(waiting.RunID); st.Status != string(machine.ApprovalWaitingExternal) {
		t.Fatalf("status %s, want waiting_external", st.Status)
	}
	st, err = c.Deliver(ctx, waiting.RunID, "reply", "msg-1", "mail", nil)
	if err != nil || st.External == nil || st.External.EventID != "msg-1" {
		t.Fatalf("Deliver = %+v, %v", st, err)
	}
	if st := g.waitStatus(waiting.RunID); st.Status != string(machine.ApprovalCompleted) {
		t.Fatalf("status %s, want completed", st.Status)
	}
}

func TestCancelRoute(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{running: true})
	ctx := context.Background()
	c := g.client(lifecycle.ActorGateway)
	res, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Cancel(ctx, res.RunID, "changed my mind")
	if err != nil || st.CancelReason != "changed my mind" {
		t.Fatalf("Cancel = %+v, %v", st, err)
	}
	if st := g.waitStatus(res.RunID); st.Status != string(machine.CancelableCanceled) {
		t.Fatalf("status %s, want canceled", st.Status)
	}
	// The frontend reads only.
	_, err = g.client(lifecycle.ActorFrontend).Cancel(ctx, res.RunID, "")
	apiError(t, err, http.StatusForbidden, codes.Forbidden)
	if !errors.Is(err, lifecycle.ErrForbiddenActor) || !errors.Is(err, authority.ErrForbidden) {
		t.Errorf("%v does not match the forbidden sentinels", err)
	}
}

func TestIdempotentSubmit(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	c := g.client(lifecycle.ActorGateway)
	req := lifecycle.SubmitRequest{AgentSlug: "quick", IdempotencyKey: "req-42"}
	first, err := c.Submit(ctx, req)
	if err != nil || first.Duplicate {
		t.Fatalf("first Submit = %+v, %v", first, err)
	}
	second, err := c.Submit(ctx, req)
	if err != nil || !second.Duplicate || second.RunID != first.RunID {
		t.Fatalf("second Submit = %+v, %v; want the first run %s as a duplicate", second, err, first.RunID)
	}
	// The wire: 201 then 200 with duplicate true; the key is api:{actor}:{id}.
	status, _, body := g.raw("POST", "/agents/run", "tok-gateway", "application/json", []byte(`{"agent_slug":"quick"}`), map[string]string{"X-Request-ID": "req-42"})
	if status != http.StatusOK || string(body) != `{"run_id":"`+first.RunID+`","duplicate":true}`+"\n" {
		t.Errorf("X-Request-ID duplicate: %d %s", status, body)
	}
	rec, err := idemrecord.Read(ctx, g.store, time.Now(), "api:gateway:req-42")
	if err != nil || rec.RunID != first.RunID {
		t.Errorf("idempotency record %+v, %v", rec, err)
	}
	// Another actor's request id is another key: a new run.
	status, _, _ = g.raw("POST", "/agents/run", "tok-admin", "application/json", []byte(`{"agent_slug":"quick"}`), map[string]string{"X-Request-ID": "req-42"})
	if status != http.StatusCreated {
		t.Errorf("admin's req-42: %d, want 201", status)
	}
	// A key with another source's scheme is an id of the caller's; another request under it
	// is a conflict.
	if _, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick", IdempotencyKey: "github:delivery-1"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "gate", IdempotencyKey: "github:delivery-1"})
	apiError(t, err, http.StatusConflict, codes.IdempotencyConflict)
	if !errors.Is(err, lifecycle.ErrIdempotencyConflict) {
		t.Errorf("%v does not match run.ErrIdempotencyConflict", err)
	}
}

func TestJobRoutes(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	gw, admin := g.client(lifecycle.ActorGateway), g.client(lifecycle.ActorAdmin)
	job, err := gw.Enqueue(ctx, lifecycle.NewJob{JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "quick",
		Payload: json.RawMessage(`{"topic":"violins"}`), Context: lifecycle.JobContext{EntityRefs: []string{"e-1"}}})
	if err != nil || job.Status != lifecycle.JobQueued || job.JobID != "job-1" || len(job.Context.EntityRefs) != 1 {
		t.Fatalf("Enqueue = %+v, %v", job, err)
	}
	if _, err := gw.Enqueue(ctx, lifecycle.NewJob{JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "quick"}); !errors.Is(err, lifecycle.ErrJobExists) {
		t.Errorf("second Enqueue: %v, want jobqueue.ErrJobExists", err)
	}
	jobs, _, err := gw.Jobs(ctx, client.Query{All: true})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("Jobs = %+v, %v", jobs, err)
	}
	if j, err := g.client(lifecycle.ActorFrontend).Job(ctx, "job-1"); err != nil || j.JobID != "job-1" {
		t.Fatalf("Job = %+v, %v", j, err)
	}
	if _, err := gw.Job(ctx, "job-nope"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Job(unknown) = %v, want storage.ErrNotFound", err)
	}
	// A job that fails for good goes DEAD; the admin requeues it.
	cl, err := g.queue.Claim(ctx, "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	dead, err := cl.Run(ctx, jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("no notebook"))
	}})
	if err != nil || dead.Status != lifecycle.JobDead {
		t.Fatalf("Run = %+v, %v", dead, err)
	}
	_, err = gw.Requeue(ctx, "job-1")
	apiError(t, err, http.StatusForbidden, codes.Forbidden)
	j, err := admin.Requeue(ctx, "job-1")
	if err != nil || j.Status != lifecycle.JobQueued || j.Attempt != 0 {
		t.Fatalf("Requeue = %+v, %v", j, err)
	}
}

func TestInboxRoutes(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	c := g.client(lifecycle.ActorSystem) // the route admits it; the Worker writes as the gateway
	id, err := c.SubmitInbox(ctx, lifecycle.InboxSubmission{Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
		Intent: lifecycle.InboxIntent{Action: "research", Target: "violins"}})
	if err != nil || id == "" {
		t.Fatalf("SubmitInbox = %q, %v", id, err)
	}
	stats, err := c.InboxStats(ctx)
	if err != nil || stats.Pending != 1 || stats.Total != 1 {
		t.Fatalf("InboxStats = %+v, %v", stats, err)
	}
	entries, _, err := c.InboxEntries(ctx, client.Query{Status: string(lifecycle.InboxPending), All: true})
	if err != nil || len(entries) != 1 || entries[0].ID != id || entries[0].Status != lifecycle.InboxPending {
		t.Fatalf("InboxEntries = %+v, %v", entries, err)
	}
	if entries, _, err := c.InboxEntries(ctx, client.Query{Status: string(lifecycle.InboxProcessed), All: true}); err != nil || len(entries) != 0 {
		t.Fatalf("InboxEntries(processed) = %+v, %v", entries, err)
	}
	_, err = c.SubmitInbox(ctx, lifecycle.InboxSubmission{ID: id, Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
		Intent: lifecycle.InboxIntent{Action: "research", Target: "violins"}})
	if !errors.Is(err, lifecycle.ErrInboxEntryExists) {
		t.Errorf("second SubmitInbox: %v, want inbox.ErrEntryExists", err)
	}
}

func TestQuarantineRoutes(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	res, err := g.runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := layout.RunStatusKey("quick", res.RunID)
	good, v, err := g.store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.store.Put(ctx, key, []byte("{poison"), storage.IfMatch(v)); err != nil {
		t.Fatal(err)
	}
	c := g.client(lifecycle.ActorAdmin)
	_, err = c.Status(ctx, res.RunID)
	apiError(t, err, http.StatusGone, codes.RecordQuarantined)
	if !errors.Is(err, lifecycle.ErrCorrupt) {
		t.Errorf("%v does not match storage.ErrCorrupt", err)
	}
	qs, _, err := c.Quarantine(ctx, client.Query{All: true})
	if err != nil || len(qs) != 1 || qs[0].Key != key || string(qs[0].Data) != "{poison" || qs[0].QKey == "" {
		t.Fatalf("Quarantine = %+v, %v", qs, err)
	}
	// The operator repairs the record elsewhere; here: restore the poison
	// as it was, and see it back at its key.
	if err := c.Restore(ctx, qs[0].QKey); err != nil {
		t.Fatal(err)
	}
	if b, _, err := g.store.Get(ctx, key); err != nil || string(b) != "{poison" {
		t.Fatalf("after Restore: %q, %v", b, err)
	}
	_ = good
	if qs, _, err := c.Quarantine(ctx, client.Query{All: true}); err != nil || len(qs) != 0 {
		t.Fatalf("Quarantine after Restore = %+v, %v", qs, err)
	}
}

func TestNLMCallbackRoute(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	err := g.client(lifecycle.ActorNLMBackend).NLMCallback(ctx, lifecycle.NLMCallbackBody{JobID: "nlm-1", Status: "COMPLETE", ArtifactID: "a-1"})
	apiError(t, err, http.StatusNotFound, codes.JobNotFound)
	if !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("%v does not match storage.ErrNotFound", err)
	}
}

// TestWithoutTokens: no tokens configured, a loopback client acts as the
// actor its header names, gateway by default.
func TestWithoutTokens(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{tokens: map[string]lifecycle.Actor{}})
	ctx := context.Background()
	c := &client.Client{BaseURL: g.srv.URL, HTTP: g.srv.Client()}
	if _, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"}); err != nil {
		t.Fatalf("Submit as the default gateway: %v", err)
	}
	c.Actor = lifecycle.ActorFrontend
	_, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"})
	apiError(t, err, http.StatusForbidden, codes.Forbidden)
	c.Actor = "owner"
	if _, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"}); err != nil {
		t.Fatalf("Submit as owner: %v", err)
	}
	c.Actor = "nobody"
	_, err = c.Agents(ctx)
	apiError(t, err, http.StatusUnauthorized, codes.Unauthorized)
}

func TestPageAndMetricsMounts(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{page: true})
	status, header, _ := g.raw("GET", "/", "tok-frontend", "", nil, nil)
	if status != http.StatusFound || header.Get("Location") != "/ui/" {
		t.Errorf("GET / = %d to %q, want 302 to /ui/", status, header.Get("Location"))
	}
	status, _, body := g.raw("GET", "/ui/app.js", "tok-frontend", "", nil, nil)
	want := httptest.NewRecorder()
	page.Handler().ServeHTTP(want, httptest.NewRequest("GET", "/ui/app.js", nil))
	if status != http.StatusOK || len(body) == 0 || string(body) != want.Body.String() {
		t.Errorf("GET /ui/app.js = %d %q, want the page's app.js", status, body)
	}
	// The assets need no token (a browser's navigation carries none); the
	// API calls the page makes do.
	status, _, _ = g.raw("GET", "/ui/", "", "", nil, nil)
	if status != http.StatusOK {
		t.Errorf("GET /ui/ without a token = %d, want 200", status)
	}
	status, _, _ = g.raw("POST", "/ui/", "", "", nil, nil)
	if status != http.StatusUnauthorized {
		t.Errorf("POST /ui/ without a token = %d, want 401", status)
	}
	status, _, _ = g.raw("GET", "/agents", "", "", nil, nil)
	if status != http.StatusUnauthorized {
		t.Errorf("GET /agents without a token = %d, want 401", status)
	}
}
