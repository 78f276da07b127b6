package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// recordingMetrics keeps every metric call.
type recordingMetrics struct {
	mu          sync.Mutex
	transitions []string
	finished    []string
	idem        []string
}

func (m *recordingMetrics) RunTransition(_, machine, from, to string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.transitions = append(m.transitions, machine+":"+from+">"+to)
}

func (m *recordingMetrics) RunFinished(agent, status string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finished = append(m.finished, agent+":"+status)
}

func (m *recordingMetrics) Idempotency(source string, hit bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.idem = append(m.idem, source+":"+map[bool]string{true: "hit", false: "miss"}[hit])
}

func TestObservability(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	metrics := &recordingMetrics{}
	var logs *testlog.Buffer
	agent := run.Agent{Slug: "observed", Steps: []run.Step{okStep("one"), okStep("two")}}
	r, _ := g.runner("a", func(c *run.Config) { c.Metrics = metrics; logs = capture(c) }, agent)
	ctx := context.Background()
	req := lifecycle.SubmitRequest{AgentSlug: agent.Slug, IdempotencyKey: "api:cli-abc123:req-1"}
	res, err := r.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	g.wait(r, res.RunID, 0, 0)
	// The run's end is logged and counted after its final status write, in
	// the same goroutine: no clock event to wait on.
	until(t, "the run_completed event", func() bool { return strings.Contains(logs.String(), `"msg":"run_completed"`) })

	// The log events of docs/spec.md#metrics, with their fields.
	var events = map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		events[rec["msg"].(string)] = rec
	}
	for name, fields := range map[string][]string{
		"run_created":     {"runId", "type", "idempotencyKey"},
		"run_transition":  {"runId", "from", "to", "initiator"},
		"run_checkpoint":  {"runId", "stepId", "resumable"},
		"run_completed":   {"runId", "durationMs", "status"},
		"idempotency_hit": {"key", "cachedRunId"},
	} {
		rec, ok := events[name]
		if !ok {
			t.Errorf("no %s event in:\n%s", name, logs.String())
			continue
		}
		for _, f := range fields {
			if _, ok := rec[f]; !ok {
				t.Errorf("%s lacks %s: %v", name, f, rec)
			}
		}
	}
	// The run metrics of docs/spec.md#metrics.
	metrics.mu.Lock()
	defer metrics.mu.Unlock()
	want := []string{"canonical-run:>requested", "canonical-run:requested>queued", "canonical-run:queued>running",
		"canonical-run:running>running", "canonical-run:running>completed"}
	if strings.Join(metrics.transitions, " ") != strings.Join(want, " ") {
		t.Errorf("transitions %v, want %v", metrics.transitions, want)
	}
	if len(metrics.finished) != 1 || metrics.finished[0] != "observed:completed" {
		t.Errorf("finished %v", metrics.finished)
	}
	active, err := r.ActiveRuns(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for status, n := range active {
		if n != 0 {
			t.Errorf("ActiveRuns %s = %d after the run ended", status, n)
		}
	}
	if strings.Join(metrics.idem, " ") != "api:miss api:hit" {
		t.Errorf("idempotency %v", metrics.idem)
	}
}

func TestSubmitRefusesBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	r, _ := g.runner("a", nil, run.Agent{Slug: "ok", Steps: []run.Step{okStep("s")}})
	ctx := context.Background()
	tests := []struct {
		name string
		req  lifecycle.SubmitRequest
	}{
		{"unknown agent", lifecycle.SubmitRequest{AgentSlug: "nope"}},
		{"path agent", lifecycle.SubmitRequest{AgentSlug: "../x"}},
		{"bad trigger", lifecycle.SubmitRequest{AgentSlug: "ok", Trigger: "webhook"}},
		{"bad input", lifecycle.SubmitRequest{AgentSlug: "ok", Input: json.RawMessage(`{"a":`)}},
		{"bad key scheme", lifecycle.SubmitRequest{AgentSlug: "ok", IdempotencyKey: "jira:1"}},
		{"key with space", lifecycle.SubmitRequest{AgentSlug: "ok", IdempotencyKey: "github:a b"}},
		{"key missing part", lifecycle.SubmitRequest{AgentSlug: "ok", IdempotencyKey: "api:client-only"}},
		// A key over its limit is an INPUT_TOO_LARGE *InputError: TestRunnerRefusesBadInput.
	}
	for _, tt := range tests {
		_, err := r.Submit(ctx, tt.req)
		var re *run.RequestError
		if !errors.As(err, &re) || codes.HTTPStatus(lifecycle.ErrorCode(err)) != 400 {
			t.Errorf("%s: %v, want a 400 RequestError", tt.name, err)
		}
	}
	for key, err := range g.store.List(ctx, "") {
		t.Errorf("refused submits wrote %s (%v)", key, err)
	}
	for _, id := range []string{"../etc/passwd", "", strings.Repeat("r", 300), "run\x00"} {
		if _, err := r.Status(ctx, id); lifecycle.ErrorCode(err) != codes.InvalidRequest {
			t.Errorf("Status(%q): %v", id, err)
		}
	}
	if _, err := r.Status(ctx, "run_2026-02-14_080000_abc123"); !errors.Is(err, lifecycle.ErrRunNotFound) {
		t.Errorf("unknown run: %v", err)
	}
}

func TestNewRunnerRefusesBadConfig(t *testing.T) {
	t.Parallel()
	store := memStore(t)
	ok := run.Agent{Slug: "a", Steps: []run.Step{okStep("s")}}
	tests := []struct {
		name   string
		cfg    run.Config
		agents []run.Agent
		want   string
	}{
		{"no store", run.Config{}, []run.Agent{ok}, "Store is required"},
		{"no agents", run.Config{Store: store}, nil, "no agents"},
		{"bad slug", run.Config{Store: store}, []run.Agent{{Slug: "a/b", Steps: ok.Steps}}, "agent slug"},
		{"unknown machine", run.Config{Store: store}, []run.Agent{{Slug: "a", Machine: "fsm", Steps: ok.Steps}}, "unknown machine"},
		{"no steps", run.Config{Store: store}, []run.Agent{{Slug: "a"}}, "no steps"},
		{"bad step name", run.Config{Store: store}, []run.Agent{{Slug: "a", Steps: []run.Step{{Name: "x/y", Run: ok.Steps[0].Run}}}}, "step name"},
		{"duplicate step", run.Config{Store: store}, []run.Agent{{Slug: "a", Steps: []run.Step{ok.Steps[0], ok.Steps[0]}}}, "used twice"},
		{"nil run", run.Config{Store: store}, []run.Agent{{Slug: "a", Steps: []run.Step{{Name: "s"}}}}, "no Run func"},
		{"duplicate agent", run.Config{Store: store}, []run.Agent{ok, ok}, "given twice"},
		{"heartbeat too slow", run.Config{Store: store, HeartbeatInterval: time.Hour}, []run.Agent{ok}, "shorter than LeaseDuration"},
	}
	for _, tt := range tests {
		_, err := run.NewRunner(tt.cfg, tt.agents...)
		if !errors.Is(err, run.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrInvalidConfig saying %q", tt.name, err, tt.want)
		}
	}
}

func TestHTTPStatusTable(t *testing.T) {
	t.Parallel()
	tests := map[string]int{
		codes.NLMUnavailable: 502, codes.UpstreamUnavailable: 502, codes.AgentTimeout: 504,
		codes.InternalError: 500, codes.InvalidTransition: 409, codes.TerminalState: 409,
		codes.Forbidden: 403, codes.IdempotencyConflict: 409, codes.IdempotencyExpired: 410,
		codes.RunNotFound: 404, codes.InvalidRequest: 400, "SOMETHING_ELSE": 500,
	}
	for code, want := range tests {
		if got := codes.HTTPStatus(code); got != want {
			t.Errorf("HTTPStatus(%s) = %d, want %d", code, got, want)
		}
	}
	wrapped := fmtErr(lifecycle.NewRunError(codes.NLMUnavailable, "down"))
	if lifecycle.ErrorCode(wrapped) != codes.NLMUnavailable || lifecycle.ErrorCode(errors.New("x")) != codes.InternalError || lifecycle.ErrorCode(nil) != "" {
		t.Error("ErrorCode does not see through wrapping")
	}
}

func fmtErr(err error) error { return errors.Join(errors.New("context"), err) }

// TestPollNotStarvedByHandoffs: a run submitted through another runner is
// found by this one's poll even while work is handed to it every half
// PollInterval (a poll timer reset at each handoff would never fire).
func TestPollNotStarvedByHandoffs(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	agent := run.Agent{Slug: "busy", Concurrency: 4, Steps: []run.Step{okStep("s")}}
	r, _ := g.runner("a", nil, agent)
	gateway, err := run.NewRunner(run.Config{Store: g.store, Clock: g.clock}, agent) // never Run
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := gateway.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: agent.Slug})
	if err != nil {
		t.Fatal(err)
	}
	// Each half PollInterval a run is handed over; the clock moves once the
	// runner waits on it again (the handed run done).
	for range 8 {
		submit(t, r, agent.Slug)
		g.idle()
		g.clock.Advance(500 * time.Millisecond)
	}
	if st := g.wait(r, foreign.RunID, 0, 0); st.Status != "completed" {
		t.Fatalf("the foreign run: %s", st.Status)
	}
}
