package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// scenario is one behaviour of the Runner, run on every store.
type scenario struct {
	name string
	run  func(t *testing.T, g *rig)
}

func scenarios() []scenario {
	return []scenario{
		{"HappyPathReadsLikeTheSeed", scenarioHappyPath},
		{"ConcurrencyLimitQueues", scenarioConcurrency},
		{"RetriesWithBackoff", scenarioRetries},
		{"RetriesExhausted", scenarioRetriesExhausted},
		{"StepTimeout", scenarioStepTimeout},
		{"RunTimeout", scenarioRunTimeout},
		{"CancelQueued", scenarioCancelQueued},
		{"CancelRunning", scenarioCancelRunning},
		{"CancelLosesToFinishedStep", scenarioCancelLoses},
		{"CancelUnsupported", scenarioCancelUnsupported},
		{"ApproveAndReject", scenarioApproval},
		{"ExternalEvent", scenarioExternal},
		{"Takeover", scenarioTakeover},
		{"PausedRunnerIsFenced", scenarioFencing},
		{"LostRunnerCannotFreeTheSlot", scenarioSlotFencing},
		{"Idempotency", scenarioIdempotency},
		{"QueueTimeout", scenarioQueueTimeout},
		{"HeartbeatKeepsLease", scenarioHeartbeatKeepsLease},
	}
}

func runScenarios(t *testing.T, newStore func(testing.TB) *storage.Store) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, newRig(t, newStore(t)))
		})
	}
}

func TestRunnerScenariosMemstore(t *testing.T) { runScenarios(t, memStore) }

func TestRunnerScenariosMinIO(t *testing.T) { runScenarios(t, minioStore) }

// blocker is a step that waits until released or its context ends.
type blocker struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
	calls   atomic.Int32
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}), release: make(chan struct{})}
}

func (b *blocker) step(name string) run.Step {
	return run.Step{Name: name, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		b.calls.Add(1)
		b.once.Do(func() { close(b.started) })
		if testSelect(ctx, b.release) {
			return run.StepOutput{Summary: name}, nil
		}
		return run.StepOutput{}, ctx.Err()
	}}
}

func submit(t *testing.T, r *run.Runner, slug string) string {
	t.Helper()
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: slug})
	if err != nil {
		t.Fatal(err)
	}
	return res.RunID
}

func status(t *testing.T, r *run.Runner, id string) lifecycle.RunStatus {
	t.Helper()
	st, err := r.Status(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func scenarioHappyPath(t *testing.T, g *rig) {
	agent := run.Agent{Slug: "archivist-violin", Steps: []run.Step{okStep("context"), okStep("execute"), okStep("persist")}}
	r, _ := g.runner("a", nil, agent)
	id := submit(t, r, agent.Slug)
	st := g.wait(r, id, 0, 0)
	if st.Status != "completed" || st.StepsCompleted != 3 || st.CurrentStep != "persist" {
		t.Fatalf("status %+v", st)
	}
	// status.json carries the platform's fields (docs/spec.md#run-status), null
	// where the spec has null, and no SDK field left behind by the run.
	key, _ := layout.RunStatusKey(agent.Slug, id)
	var raw map[string]any
	readJSON(t, g.store, key, &raw)
	for _, f := range []string{"run_id", "agent_slug", "status", "trigger", "started_at", "finished_at", "current_step", "steps_total", "steps_completed", "proposals_created", "error"} {
		if _, ok := raw[f]; !ok {
			t.Errorf("status.json lacks %q: %v", f, raw)
		}
	}
	if raw["error"] != nil || raw["trigger"] != "manual" {
		t.Errorf("error %v, trigger %v", raw["error"], raw["trigger"])
	}
	for _, f := range []string{"lease", "cancel_requested", "approval", "external", "resume_count", "machine"} {
		if _, ok := raw[f]; ok {
			t.Errorf("status.json of a finished plain run has %q", f)
		}
	}
	for _, f := range []string{"started_at", "finished_at"} {
		if _, err := time.Parse(time.RFC3339, raw[f].(string)); err != nil || !strings.HasSuffix(raw[f].(string), "Z") {
			t.Errorf("%s = %v is not RFC 3339 UTC", f, raw[f])
		}
	}
	// One audit event per status write: requested, queued, running, 2 step
	// updates, completed.
	// The audit event follows its status write, so it may land just after
	// Wait saw the status.
	var events []lifecycle.AuditEvent
	until(t, "six audit events", func() bool {
		events = events[:0]
		for ev, err := range records.ReadAuditDay(context.Background(), g.store, epoch0) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.RunID == id {
				events = append(events, ev)
			}
		}
		return len(events) >= 6
	})
	var moves []string
	for _, ev := range events {
		moves = append(moves, ev.From+">"+ev.To)
	}
	// The fake clock stands still, so events share a timestamp and list in
	// any order: compare them as a set.
	want := []string{">requested", "requested>queued", "queued>running", "running>running", "running>running", "running>completed"}
	slices.Sort(moves)
	slices.Sort(want)
	if !slices.Equal(moves, want) {
		t.Errorf("audit moves %v, want %v", moves, want)
	}
	// The run leaves no active entry and no held slot behind (cleanup follows
	// the final status write).
	until(t, "cleanup after the run", func() bool {
		for range g.store.List(context.Background(), "index/active/") {
			return false
		}
		for key := range g.store.List(context.Background(), "agents/"+agent.Slug+"/slots/") {
			var slot struct {
				RunID string `json:"run_id"`
			}
			readJSON(t, g.store, key, &slot)
			if slot.RunID != "" {
				return false
			}
		}
		return true
	})
}

func scenarioConcurrency(t *testing.T, g *rig) {
	b := newBlocker()
	agent := run.Agent{Slug: "one-at-a-time", Steps: []run.Step{b.step("work")}}
	r, _ := g.runner("a", nil, agent)
	first := submit(t, r, agent.Slug)
	<-b.started
	// Idle, the runner waits on four timers: its poll, and the first run's
	// run timeout, heartbeat and step deadline.
	const idle = 4
	g.timers(idle)
	second := submit(t, r, agent.Slug)
	// The second run waits in queued while the slot is taken; that is no
	// error. Each tick fires the poll; its pass is over when the next poll
	// timer is scheduled.
	for range 3 {
		g.tick(time.Second, idle)
	}
	if st := status(t, r, second); st.Status != "queued" || b.calls.Load() != 1 {
		t.Fatalf("second run %s with %d steps started; want queued", st.Status, b.calls.Load())
	}
	close(b.release)
	if st := g.wait(r, first, 0, 0); st.Status != "completed" {
		t.Fatalf("first %s", st.Status)
	}
	if st := g.wait(r, second, time.Second, time.Minute); st.Status != "completed" {
		t.Fatalf("second %s", st.Status)
	}
}

func scenarioRetries(t *testing.T, g *rig) {
	var mu sync.Mutex
	var at []time.Time
	flaky := run.Step{Name: "nlm-query", Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		mu.Lock()
		at = append(at, g.clock.Now())
		mu.Unlock()
		if in.Attempt < 3 {
			return run.StepOutput{}, lifecycle.NewRunError(codes.NLMUnavailable, "503 from NotebookLM")
		}
		return run.StepOutput{Summary: "ok"}, nil
	}}
	agent := run.Agent{Slug: "flaky", Steps: []run.Step{flaky}}
	r, _ := g.runner("a", nil, agent)
	id := submit(t, r, agent.Slug)
	st := g.wait(r, id, 250*time.Millisecond, time.Minute)
	if st.Status != "completed" {
		t.Fatalf("status %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 3 {
		t.Fatalf("%d attempts", len(at))
	}
	// Backoff 1 s then 2 s (docs/spec.md#retries-and-timeouts), measured on the fake clock.
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		if gap := at[i+1].Sub(at[i]); gap < want || gap > want+500*time.Millisecond {
			t.Errorf("wait before attempt %d: %v, want %v", i+2, gap, want)
		}
	}
	steps, _ := r.Steps(context.Background(), id)
	if steps[0].Attempts != 3 {
		t.Errorf("step file attempts %d", steps[0].Attempts)
	}
}

func scenarioRetriesExhausted(t *testing.T, g *rig) {
	var calls atomic.Int32
	coded := run.Step{Name: "nlm", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		calls.Add(1)
		return run.StepOutput{}, lifecycle.NewRunError(codes.NLMUnavailable, "NotebookLM down")
	}}
	plain := run.Step{Name: "boom", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{}, errors.New("boom")
	}}
	r, _ := g.runner("a", nil,
		run.Agent{Slug: "coded", Steps: []run.Step{coded}},
		run.Agent{Slug: "plain", Steps: []run.Step{plain}})
	a, b := submit(t, r, "coded"), submit(t, r, "plain")
	st := g.wait(r, a, time.Second, time.Minute)
	if st.Status != "failed" || *st.Error != "NLM_UNAVAILABLE: NotebookLM down" || calls.Load() != 4 {
		t.Fatalf("coded: %s %v after %d calls", st.Status, deref(st.Error), calls.Load())
	}
	st = g.wait(r, b, time.Second, time.Minute)
	if st.Status != "failed" || *st.Error != "INTERNAL_ERROR: step boom failed after 4 attempts: boom" {
		t.Fatalf("plain: %s %v", st.Status, deref(st.Error))
	}
	if code := codes.HTTPStatus(codes.NLMUnavailable); code != 502 {
		t.Errorf("NLM_UNAVAILABLE → %d", code)
	}
	steps, _ := r.Steps(context.Background(), b)
	if len(steps) != 1 || steps[0].Status != lifecycle.StepFailed || steps[0].Error == "" {
		t.Errorf("failed step file %+v", steps)
	}
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func scenarioStepTimeout(t *testing.T, g *rig) {
	b := newBlocker()
	agent := run.Agent{Slug: "slow", Steps: []run.Step{b.step("hang")}}
	r, _ := g.runner("a", func(c *run.Config) { c.StepRetries = -1 }, agent)
	id := submit(t, r, agent.Slug)
	<-b.started
	st := g.wait(r, id, 10*time.Second, 5*time.Minute)
	if st.Status != "failed" || *st.Error != "AGENT_TIMEOUT: step hang exceeded 120s limit" {
		t.Fatalf("%s %v", st.Status, deref(st.Error))
	}
	if codes.HTTPStatus(codes.AgentTimeout) != 504 {
		t.Error("AGENT_TIMEOUT is not a 504")
	}
}

func scenarioRunTimeout(t *testing.T, g *rig) {
	b := newBlocker()
	r, _ := g.runner("a", func(c *run.Config) { c.StepTimeout = time.Hour },
		run.Agent{Slug: "canon", Steps: []run.Step{b.step("hang")}},
		run.Agent{Slug: "cancelable", Machine: lifecycle.MachineCancelable, Steps: []run.Step{b.step("hang")}})
	a, c := submit(t, r, "canon"), submit(t, r, "cancelable")
	st := g.wait(r, a, 30*time.Second, 20*time.Minute)
	if st.Status != "failed" || *st.Error != "AGENT_TIMEOUT: execution exceeded 600s limit" {
		t.Fatalf("canonical: %s %v", st.Status, deref(st.Error))
	}
	st = g.wait(r, c, 30*time.Second, 20*time.Minute)
	if st.Status != "timeout" || *st.Error != "AGENT_TIMEOUT: execution exceeded 600s limit" {
		t.Fatalf("cancel-aware: %s %v", st.Status, deref(st.Error))
	}
}

func scenarioCancelQueued(t *testing.T, g *rig) {
	b := newBlocker()
	agent := run.Agent{Slug: "c", Machine: lifecycle.MachineCancelable, Steps: []run.Step{b.step("work")}}
	r, _ := g.runner("a", nil, agent)
	busy := submit(t, r, agent.Slug)
	<-b.started
	queued := submit(t, r, agent.Slug)
	st, err := r.Cancel(context.Background(), queued, lifecycle.ActorGateway, run.CancelRequest{Reason: "changed my mind"})
	if err != nil || st.Status != "canceled" || !st.CancelRequested || st.CancelReason != "changed my mind" || st.FinishedAt == nil {
		t.Fatalf("cancel queued: %+v %v", st, err)
	}
	// Mastra may not cancel; a finished run cannot be canceled.
	if _, err := r.Cancel(context.Background(), busy, lifecycle.ActorMastra, run.CancelRequest{Reason: ""}); !errors.Is(err, lifecycle.ErrForbiddenActor) {
		t.Errorf("mastra cancel: %v", err)
	}
	if _, err := r.Cancel(context.Background(), queued, lifecycle.ActorGateway, run.CancelRequest{Reason: ""}); !errors.Is(err, lifecycle.ErrTerminalState) {
		t.Errorf("cancel of a canceled run: %v", err)
	}
	close(b.release)
	if st := g.wait(r, busy, 0, 0); st.Status != "succeeded" {
		t.Fatalf("busy run %s", st.Status)
	}
	if b.calls.Load() != 1 {
		t.Errorf("the canceled run executed a step")
	}
}

func scenarioCancelRunning(t *testing.T, g *rig) {
	b := newBlocker()
	agent := run.Agent{Slug: "c", Machine: lifecycle.MachineCancelable, Steps: []run.Step{b.step("work"), okStep("never")}}
	approval := run.Agent{Slug: "ap", Machine: lifecycle.MachineApproval, Steps: []run.Step{b.step("work")}}
	r, _ := g.runner("a", nil, agent, approval)
	id := submit(t, r, agent.Slug)
	<-b.started
	st, err := r.Cancel(context.Background(), id, lifecycle.ActorGateway, run.CancelRequest{Reason: "stop"})
	if err != nil || st.Status != "cancel_requested" {
		t.Fatalf("cancel running: %+v %v", st, err)
	}
	st = g.wait(r, id, 0, 0)
	if st.Status != "canceled" || st.StepsCompleted != 0 {
		t.Fatalf("after cancel: %+v", st)
	}
	// The approval machine has no cancel_requested: the runner makes the move.
	b2 := newBlocker()
	approval.Steps = []run.Step{b2.step("work")}
	g2 := g.with(g.store)
	r2, _ := g2.runner("b", nil, approval)
	id2 := submit(t, r2, approval.Slug)
	<-b2.started
	if st, err := r2.Cancel(context.Background(), id2, lifecycle.ActorGateway, run.CancelRequest{Reason: "stop"}); err != nil || st.Status != "running" || !st.CancelRequested {
		t.Fatalf("approval cancel: %+v %v", st, err)
	}
	if st := g2.wait(r2, id2, 0, 0); st.Status != "cancelled" {
		t.Fatalf("approval run %s", st.Status)
	}
}

func scenarioCancelLoses(t *testing.T, g *rig) {
	release := make(chan struct{})
	started := make(chan struct{})
	stubborn := run.Step{Name: "finish", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		close(started)
		testWait(ctx, release) // ignores ctx: finishes first
		return run.StepOutput{Summary: "done anyway"}, nil
	}}
	// The step ignores its context, so the runner stops waiting for it at the
	// cancel; to let it finish first the cancel must reach a runner that is
	// not this one: a second runner's Cancel writes cancel_requested, and
	// this runner only notices at its next heartbeat.
	agent := run.Agent{Slug: "c", Machine: lifecycle.MachineCancelable, Steps: []run.Step{stubborn}}
	r, _ := g.runner("a", nil, agent)
	id := submit(t, r, agent.Slug)
	<-started
	other, _ := g.runner("b", nil, agent) // started now, it finds the run held
	if st, err := other.Cancel(context.Background(), id, lifecycle.ActorGateway, run.CancelRequest{Reason: "late"}); err != nil || st.Status != "cancel_requested" {
		t.Fatalf("cancel: %+v %v", st, err)
	}
	close(release)
	st := g.wait(r, id, 0, 0)
	if st.Status != "succeeded" || !st.CancelRequested {
		t.Fatalf("a step that finished first should end the run succeeded: %+v", st)
	}
}

func scenarioCancelUnsupported(t *testing.T, g *rig) {
	b := newBlocker()
	r, _ := g.runner("a", nil, run.Agent{Slug: "canon", Steps: []run.Step{b.step("work")}})
	id := submit(t, r, "canon")
	<-b.started
	_, err := r.Cancel(context.Background(), id, lifecycle.ActorGateway, run.CancelRequest{Reason: ""})
	if !errors.Is(err, lifecycle.ErrRunUnsupported) || lifecycle.ErrorCode(err) != codes.Unsupported || !strings.Contains(err.Error(), "canonical-run does not support cancel") {
		t.Fatalf("cancel on the canonical machine: %v", err)
	}
	if _, err := r.Approve(context.Background(), id, lifecycle.ActorGateway, run.Decision{}); !errors.Is(err, lifecycle.ErrRunUnsupported) {
		t.Fatalf("approve on the canonical machine: %v", err)
	}
	if st := status(t, r, id); st.Status != "running" || st.CancelRequested {
		t.Fatalf("refused cancel changed the run: %+v", st)
	}
	close(b.release)
	g.wait(r, id, 0, 0)
}

func awaitStep(name string, await *run.Await) run.Step {
	return run.Step{Name: name, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: name, Data: json.RawMessage(`"` + name + `"`), Await: await}, nil
	}}
}

func scenarioApproval(t *testing.T, g *rig) {
	var seen atomic.Value
	check := run.Step{Name: "apply", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		seen.Store(string(in.Previous[0]))
		return run.StepOutput{Summary: "applied"}, nil
	}}
	agent := run.Agent{Slug: "gated", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("plan", &run.Await{Approval: "merge"}), check}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()

	id := submit(t, r, agent.Slug)
	st := g.wait(r, id, 0, 0)
	if st.Status != "awaiting_approval" || st.Approval == nil || st.Approval.Action != "merge" || st.Lease != nil {
		t.Fatalf("parked: %+v", st)
	}
	// A parked run holds no slot: another run of the agent can start.
	other := submit(t, r, agent.Slug)
	if st := g.wait(r, other, 0, 0); st.Status != "awaiting_approval" {
		t.Fatalf("second run %s", st.Status)
	}
	if _, err := r.Approve(ctx, id, lifecycle.ActorMastra, run.Decision{}); !errors.Is(err, lifecycle.ErrForbiddenActor) {
		t.Errorf("mastra approving: %v", err)
	}
	if st, err := r.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner"}); err != nil || st.Status != "running" {
		t.Fatalf("approve: %+v %v", st, err)
	}
	st = g.wait(r, id, time.Second, time.Minute)
	if st.Status != "completed" || st.Approval.Decision != "approved" || st.Approval.DecidedBy != "owner" || seen.Load() != `"plan"` {
		t.Fatalf("after approval: %+v (previous %v)", st, seen.Load())
	}
	st, err := r.Reject(ctx, other, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner", Reason: "too risky"})
	if err != nil || st.Status != "failed" || *st.Error != "APPROVAL_REJECTED: too risky" {
		t.Fatalf("reject: %+v %v", st, err)
	}
	if _, err := r.Approve(ctx, other, lifecycle.ActorGateway, run.Decision{}); !errors.Is(err, lifecycle.ErrTerminalState) {
		t.Errorf("approve after reject: %v", err)
	}
}

func scenarioExternal(t *testing.T, g *rig) {
	agent := run.Agent{Slug: "ci-wait", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{okStep("push"), awaitStep("wait-ci", &run.Await{ExternalEvent: "ci.finished", Timeout: time.Hour})}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	id := submit(t, r, agent.Slug)
	st := g.wait(r, id, 0, 0)
	if st.Status != "waiting_external" || st.External == nil || st.External.EventType != "ci.finished" {
		t.Fatalf("parked: %+v", st)
	}
	if _, err := r.Deliver(ctx, id, lifecycle.ActorGateway, run.ExternalEvent{Type: "other"}); lifecycle.ErrorCode(err) != codes.InvalidRequest {
		t.Errorf("wrong event type: %v", err)
	}
	// The wait followed the last step: after the event the runner completes
	// the run and writes its manifest.
	st, err := r.Deliver(ctx, id, lifecycle.ActorGateway, run.ExternalEvent{Type: "ci.finished", ID: "evt-1", Source: "github"})
	if err != nil || st.Status != "running" || st.External.EventID != "evt-1" {
		t.Fatalf("deliver: %+v %v", st, err)
	}
	if st := g.wait(r, id, time.Second, time.Minute); st.Status != "completed" || st.StepsCompleted != 2 || st.FinishedAt == nil {
		t.Fatalf("after the event: %+v", st)
	}
	mkey, _ := layout.RunManifestKey(agent.Slug, id)
	var m manifestDoc
	readJSON(t, g.store, mkey, &m)
	if len(m.Steps) != 2 || m.Status != "completed" {
		t.Errorf("manifest %+v", m)
	}
	// A wait that is never answered fails at its own timeout.
	late := submit(t, r, agent.Slug)
	if st := g.wait(r, late, 0, 0); st.Status != "waiting_external" {
		t.Fatalf("second run %s", st.Status)
	}
	// The clock moves while the runner waits on it: its poll finds the
	// wait's deadline (an hour) passed.
	st = g.waitFor(r, late, 5*time.Minute, 2*time.Hour, func(st lifecycle.RunStatus) bool { return st.Status == "failed" })
	if !strings.HasPrefix(*st.Error, "AGENT_TIMEOUT: external event ci.finished not received") {
		t.Fatalf("timed out wait: %v", *st.Error)
	}
}

// countingStep counts executions per step name across runners.
type countingStep struct {
	mu    sync.Mutex
	count map[string]int
}

func (c *countingStep) inc(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.count == nil {
		c.count = map[string]int{}
	}
	c.count[name]++
}

func (c *countingStep) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count[name]
}

func scenarioTakeover(t *testing.T, g *rig) {
	tests := []struct {
		name          string
		first, second run.Step // the second blocks in runner a
		wantStatus    string
		wantError     string
		wantFirstRuns int
	}{
		{name: "resumable-skip-idempotent-replay", first: run.Step{Name: "one", Resumable: true}, second: run.Step{Name: "two", Idempotent: true},
			wantStatus: "completed", wantFirstRuns: 1},
		{name: "not-idempotent-fails", first: run.Step{Name: "one", Resumable: true}, second: run.Step{Name: "two"},
			wantStatus: "failed", wantError: "RUN_RESUME_FAILED: runner lost in step two, which is not idempotent", wantFirstRuns: 1},
		{name: "completed-not-resumable-replays", first: run.Step{Name: "one", Idempotent: true}, second: run.Step{Name: "two", Idempotent: true},
			wantStatus: "completed", wantFirstRuns: 2},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slug := fmt.Sprintf("takeover-%d", i)
			var counts countingStep
			hold := make(chan struct{})
			inA := make(chan struct{}, 1)
			mk := func(owner string) run.Agent {
				first, second := tt.first, tt.second
				first.Run = func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
					counts.inc("one")
					return run.StepOutput{Data: json.RawMessage(`"one"`)}, nil
				}
				second.Run = func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
					counts.inc("two")
					if string(in.Previous[0]) != `"one"` {
						return run.StepOutput{}, fmt.Errorf("previous output %s", in.Previous[0])
					}
					if owner == "a" {
						inA <- struct{}{}
						if !testSelect(ctx, hold) {
							return run.StepOutput{}, ctx.Err()
						}
					}
					return run.StepOutput{}, nil
				}
				return run.Agent{Slug: slug, Steps: []run.Step{first, second, okStep("three")}}
			}
			a, stopA := g.runner("a", nil, mk("a"))
			id := submit(t, a, slug)
			<-inA
			stopA() // runner a is lost mid-step; its lease stays behind
			if st := status(t, a, id); st.Lease == nil || st.Lease.Owner != "a" || st.StepsCompleted != 1 {
				t.Fatalf("after losing a: %+v", st)
			}
			b, _ := g.runner("b", nil, mk("b"))
			st := g.wait(b, id, 30*time.Second, 10*time.Minute)
			if st.Status != tt.wantStatus || deref(st.Error) != orNil(tt.wantError) || st.ResumeCount != 1 {
				t.Fatalf("after takeover: %s %v resume %d", st.Status, deref(st.Error), st.ResumeCount)
			}
			if got := counts.get("one"); got != tt.wantFirstRuns {
				t.Errorf("step one ran %d times, want %d", got, tt.wantFirstRuns)
			}
			steps, _ := b.Steps(context.Background(), id)
			if tt.wantStatus == "completed" && (len(steps) != 3 || steps[1].Epoch != 2) {
				t.Errorf("step files %+v", steps)
			}
			close(hold)
		})
	}
	// A run lost in its first step, which is not idempotent, has no
	// checkpoint to resume from: it is an orphan.
	t.Run("orphan-without-checkpoint", func(t *testing.T) {
		b := newBlocker()
		agent := run.Agent{Slug: "orphan", Steps: []run.Step{b.step("only")}}
		a, stopA := g.runner("a2", nil, agent)
		id := submit(t, a, agent.Slug)
		<-b.started
		stopA()
		var logs *testlog.Buffer
		r, _ := g.runner("b2", func(c *run.Config) { logs = capture(c) }, agent)
		st := g.wait(r, id, 30*time.Second, 10*time.Minute)
		if st.Status != "failed" || !strings.HasPrefix(deref(st.Error), "RUN_ORPHANED:") {
			t.Fatalf("orphan: %s %v", st.Status, deref(st.Error))
		}
		// docs/spec.md#metrics: orphan_detected, with the stale heartbeat.
		// The lost runner's last heartbeat was its claim, when the run started.
		want := `"msg":"orphan_detected","runId":"` + id + `","lastHeartbeat":"` + st.StartedAt.Format(time.RFC3339) + `"`
		if l := logs.String(); !strings.Contains(l, want) {
			t.Errorf("no orphan_detected event for %s (status %+v) in %d bytes:\n%s", id, st, len(l), l)
		}
	})
}

func orNil(s string) string {
	if s == "" {
		return "<nil>"
	}
	return s
}

// gatedStore lets a test freeze one runner's store calls, as if its process
// were paused, and records the writes that succeed after a given moment.
type gatedStore struct {
	driver.Store
	mu        sync.Mutex
	paused    chan struct{} // closed when not paused
	recording bool
	late      []string
}

func newGatedStore(s *storage.Store) *gatedStore {
	g := &gatedStore{Store: s, paused: make(chan struct{})}
	close(g.paused)
	return g
}

func (g *gatedStore) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused = make(chan struct{})
}

func (g *gatedStore) resume(record bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recording = record
	close(g.paused)
}

func (g *gatedStore) gate(ctx context.Context) {
	g.mu.Lock()
	ch := g.paused
	g.mu.Unlock()
	testWait(ctx, ch) // a frozen process: no work of the runners
}

func (g *gatedStore) note(op, key string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.recording && err == nil && !strings.HasPrefix(key, "audit/") {
		g.late = append(g.late, op+" "+key)
	}
}

func (g *gatedStore) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	g.gate(ctx)
	ver, err := g.Store.Put(ctx, key, v, c)
	g.note("put", key, err)
	return ver, err
}

func (g *gatedStore) Delete(ctx context.Context, key string, c storage.Condition) error {
	g.gate(ctx)
	err := g.Store.Delete(ctx, key, c)
	g.note("delete", key, err)
	return err
}

func (g *gatedStore) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	g.gate(ctx)
	return g.Store.Get(ctx, key)
}

func scenarioFencing(t *testing.T, g *rig) {
	gated := newGatedStore(g.tracked())
	release := make(chan struct{})
	inA := make(chan struct{})
	var once sync.Once
	mk := func(owner string) run.Agent {
		return run.Agent{Slug: "fenced", Steps: []run.Step{{Name: "work", Idempotent: true,
			Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				if owner == "a" {
					once.Do(func() { close(inA) })
					testWait(ctx, release) // paused: ignores its context, like a frozen process
				}
				return run.StepOutput{Summary: "by " + owner, Files: map[string][]byte{"result.json": []byte(`"` + owner + `"`)}}, nil
			}}, okStep("after")}}
	}
	ga := g.around(storage.New(gated))
	var logs *testlog.Buffer
	a, _ := ga.runner("a", func(c *run.Config) { logs = capture(c) }, mk("a"))
	id := submit(t, a, "fenced")
	<-inA
	gated.pause() // runner a freezes: no heartbeat, no writes
	thawed := false
	defer func() { // whatever happens, let runner a go so cleanup cannot hang
		if !thawed {
			gated.resume(false)
			close(release)
		}
	}()
	b, _ := g.runner("b", nil, mk("b"))
	st := g.wait(b, id, 30*time.Second, 15*time.Minute)
	if st.Status != "completed" || st.ResumeCount != 1 {
		t.Fatalf("runner b: %+v", st)
	}
	// Runner a wakes up: its step returns, its heartbeat fires; every write
	// it attempts must be refused.
	thawed = true
	gated.resume(true)
	close(release)
	g.clock.Advance(time.Minute) // a wakes late: its heartbeat is overdue
	// Time moves on, whenever the runners wait on the clock, while a gives
	// up, so that a store call it retries (the patient Store waits on the clock)
	// is not left waiting.
	g.advanceUntil(time.Second, 10*time.Minute, func() bool {
		return strings.Contains(logs.String(), `"msg":"run_stopped"`) && strings.Contains(logs.String(), "at epoch 1 lost")
	}, func() string { return "runner a did not give the run up" })
	gated.mu.Lock()
	late := slices.Clone(gated.late)
	gated.mu.Unlock()
	if len(late) != 0 {
		t.Fatalf("runner a wrote after losing its lease: %v", late)
	}
	var result string
	key, _ := layout.RunOutputKey("fenced", id, "result.json")
	readJSON(t, g.store, key, &result)
	if result != "b" {
		t.Errorf("output written by %q", result)
	}
	if st := status(t, b, id); st.Status != "completed" {
		t.Errorf("final status %s", st.Status)
	}
}

// scenarioSlotFencing: a runner that lost its run to a takeover wakes up
// while the new runner still executes it; its release of the run's slot
// must be refused, or a second run of the agent could start beside it.
func scenarioSlotFencing(t *testing.T, g *rig) {
	gated := newGatedStore(g.tracked())
	releaseA, releaseB := make(chan struct{}), make(chan struct{})
	inA, inB := make(chan struct{}), make(chan struct{})
	var onceA, onceB sync.Once
	mk := func(owner string) run.Agent {
		return run.Agent{Slug: "slotted", Steps: []run.Step{{Name: "work", Idempotent: true,
			Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				if owner == "a" {
					onceA.Do(func() { close(inA) })
					testWait(ctx, releaseA) // paused: ignores its context
				} else {
					onceB.Do(func() { close(inB) })
					testWait(ctx, releaseB)
				}
				return run.StepOutput{Summary: "by " + owner}, nil
			}}}}
	}
	var logs *testlog.Buffer
	a, _ := g.around(storage.New(gated)).runner("a", func(c *run.Config) { logs = capture(c) }, mk("a"))
	id := submit(t, a, "slotted")
	<-inA
	gated.pause()
	thawed := false
	defer func() {
		if !thawed {
			gated.resume(false)
			close(releaseA)
		}
		close(releaseB)
	}()
	b, _ := g.runner("b", nil, mk("b"))
	// a's lease lapses as the clock moves; b's poll takes the run over.
	g.advanceUntil(30*time.Second, 15*time.Minute, func() bool {
		select {
		case <-inB:
			return true
		default:
			return false
		}
	}, func() string { return "runner b never took the run over" })
	// Runner a wakes up while b executes the run.
	thawed = true
	gated.resume(true)
	close(releaseA)
	defer func() {
		if t.Failed() {
			t.Logf("runner a's log:\n%s", logs.String())
		}
	}()
	// A store call a retries waits on the clock: move it while a gives up.
	g.advanceUntil(time.Second, 10*time.Minute, func() bool {
		return strings.Contains(logs.String(), `"msg":"run_stopped"`)
	}, func() string { return "runner a did not give the run up" })
	gated.mu.Lock()
	late := slices.Clone(gated.late)
	gated.mu.Unlock()
	if len(late) != 0 {
		t.Fatalf("runner a wrote after losing its lease: %v", late)
	}
	const slot = "agents/slotted/slots/0.json" // the slot layout of claim.go
	var held struct {
		RunID string `json:"run_id"`
	}
	readJSON(t, g.store, slot, &held)
	if held.RunID != id {
		t.Fatalf("while b executes %s its slot holds %q", id, held.RunID)
	}
	if st := status(t, b, id); st.Status != "running" || st.Lease == nil || st.Lease.Owner != "b" {
		t.Fatalf("run during b's step: %+v", st)
	}
}

func scenarioIdempotency(t *testing.T, g *rig) {
	b := newBlocker()
	agent := run.Agent{Slug: "webhook", Steps: []run.Step{b.step("work")}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	req := lifecycle.SubmitRequest{AgentSlug: agent.Slug, Trigger: "event", Input: json.RawMessage(`{"pr": 7}`),
		IdempotencyKey: "github:12345678-1234-1234-1234-123456789012"}

	// 100 concurrent submits with one key create exactly one run.
	var wg sync.WaitGroup
	ids := make([]string, 100)
	dups := atomic.Int32{}
	for i := range ids {
		wg.Go(func() {
			res, err := r.Submit(ctx, req)
			if err != nil {
				t.Errorf("submit %d: %v", i, err)
				return
			}
			ids[i] = res.RunID
			if res.Duplicate {
				dups.Add(1)
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("submits returned different runs: %s and %s", ids[0], id)
		}
	}
	if dups.Load() != 99 {
		t.Errorf("%d duplicates, want 99", dups.Load())
	}
	runs, err := r.Runs(ctx, agent.Slug)
	if err != nil || len(runs) != 1 {
		t.Fatalf("%d runs (%v)", len(runs), err)
	}
	// The same key with another payload is a conflict (409), and writes nothing.
	other := req
	other.Input = json.RawMessage(`{"pr": 8}`)
	_, err = r.Submit(ctx, other)
	if !errors.Is(err, lifecycle.ErrIdempotencyConflict) || codes.HTTPStatus(lifecycle.ErrorCode(err)) != 409 {
		t.Fatalf("conflict: %v", err)
	}
	// Key order in the payload does not matter.
	same := req
	same.Input = json.RawMessage(`{ "pr" : 7 }`)
	if res, err := r.Submit(ctx, same); err != nil || res.RunID != ids[0] || !res.Duplicate {
		t.Fatalf("reformatted payload: %+v %v", res, err)
	}
	close(b.release)
	g.wait(r, ids[0], 0, 0)
	rec, err := r.Idempotency(ctx, req.IdempotencyKey)
	if err != nil || rec.Status != idemrecord.Completed || rec.RunID != ids[0] || rec.Source != idemrecord.SourceGitHub {
		t.Fatalf("record %+v %v", rec, err)
	}
	// After the 24 h TTL the record is expired and the key is free again.
	g.clock.Advance(24*time.Hour + time.Minute)
	if _, err := r.Idempotency(ctx, req.IdempotencyKey); !errors.Is(err, lifecycle.ErrIdempotencyExpired) || lifecycle.ErrorCode(err) != codes.IdempotencyExpired {
		t.Fatalf("expired: %v", err)
	}
	res, err := r.Submit(ctx, other)
	if err != nil || res.Duplicate || res.RunID == ids[0] {
		t.Fatalf("submit after expiry: %+v %v", res, err)
	}
	if _, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: agent.Slug, IdempotencyKey: "gitlab:1"}); lifecycle.ErrorCode(err) != codes.InvalidRequest {
		t.Errorf("bad scheme: %v", err)
	}
}

func scenarioQueueTimeout(t *testing.T, g *rig) {
	b := newBlocker()
	agent := run.Agent{Slug: "crowded", Steps: []run.Step{b.step("work")}}
	r, _ := g.runner("a", func(c *run.Config) {
		c.QueueTimeout = 5 * time.Minute
		c.StepTimeout = time.Hour
		c.RunTimeout = time.Hour
	}, agent)
	busy := submit(t, r, agent.Slug)
	<-b.started
	waiting := submit(t, r, agent.Slug)
	st := g.wait(r, waiting, 30*time.Second, 10*time.Minute)
	if st.Status != "failed" || *st.Error != "AGENT_TIMEOUT: queued longer than 300s" {
		t.Fatalf("queued run: %s %v", st.Status, deref(st.Error))
	}
	if st := status(t, r, busy); st.Status != "running" {
		t.Fatalf("busy run %s", st.Status)
	}
	close(b.release)
	g.wait(r, busy, 0, 0)
}

func scenarioHeartbeatKeepsLease(t *testing.T, g *rig) {
	b := newBlocker()
	agent := run.Agent{Slug: "long", Steps: []run.Step{b.step("work")}}
	cfg := func(c *run.Config) { c.StepTimeout = time.Hour; c.RunTimeout = time.Hour }
	var logs *testlog.Buffer
	a, _ := g.runner("a", func(c *run.Config) { cfg(c); logs = capture(c) }, agent)
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	id := submit(t, a, agent.Slug)
	<-b.started
	g.runner("b", cfg, agent) // would take the run over if the lease lapsed
	// Idle, the runners wait on five timers: a's poll, and its run's run
	// timeout, heartbeat and step deadline; b's poll.
	const idle = 5
	g.timers(idle)
	// Twice the lease, in heartbeat-sized steps: a's heartbeat keeps it. Each
	// tick fires the beat due then, as a live process would make it, and both
	// polls; the beat is made once its timer is armed again.
	for range 20 {
		g.tick(30*time.Second, idle)
		st := status(t, a, id)
		if st.LastHeartbeatAt == nil || !st.LastHeartbeatAt.Equal(g.clock.Now()) {
			t.Fatalf("at %v a's last heartbeat is %v", g.clock.Now(), st.LastHeartbeatAt)
		}
	}
	st := status(t, a, id)
	if st.Lease == nil || st.Lease.Owner != "a" || st.Lease.Epoch != 1 || st.ResumeCount != 0 || b.calls.Load() != 1 {
		t.Fatalf("after 10 minutes: lease %+v, resumes %d, step calls %d", st.Lease, st.ResumeCount, b.calls.Load())
	}
	if st.LastHeartbeatAt.Before(epoch0.Add(9*time.Minute + 30*time.Second)) {
		t.Errorf("last heartbeat %v", st.LastHeartbeatAt)
	}
	close(b.release)
	if st := g.wait(a, id, 0, 0); st.Status != "completed" || st.ResumeCount != 0 {
		t.Fatalf("final %+v", st)
	}
}
