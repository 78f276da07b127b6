package run_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// callerTrace is the trace a caller's traceparent names.
const (
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID  = "00f067aa0ba902b7"
	callerParent  = "00-" + callerTraceID + "-" + callerSpanID + "-01"
)

// callerCtx is a context carrying the caller's trace, as a server reading
// its traceparent header makes it.
func callerCtx() context.Context {
	return propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": callerParent})
}

// recorder is an in-memory span recorder and its provider.
func recorder(t *testing.T) (*tracetest.SpanRecorder, trace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// A run submitted within a caller's trace is traced in it: the submit's
// span is the caller's child, the execution's the submit's, each step
// attempt (a retry too, after its backoff on the fake clock) the
// execution's, all with the run's id; status.json keeps the trace
// context, and the step's context carries its attempt's span.
func TestRunSpans(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	rec, tp := recorder(t)
	var (
		mu      sync.Mutex
		inStep  []trace.SpanContext
		flakied bool
	)
	flaky := run.Step{Name: "flaky", Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		mu.Lock()
		defer mu.Unlock()
		inStep = append(inStep, trace.SpanContextFromContext(ctx))
		if !flakied {
			flakied = true
			return run.StepOutput{}, errors.New("first attempt fails")
		}
		return run.StepOutput{Summary: "ok"}, nil
	}}
	agent := run.Agent{Slug: "traced", Steps: []run.Step{flaky, okStep("last")}}
	r, _ := g.runner("a", func(c *run.Config) { c.TracerProvider = tp }, agent)
	res, err := r.Submit(callerCtx(), lifecycle.SubmitRequest{AgentSlug: agent.Slug})
	if err != nil {
		t.Fatal(err)
	}
	if st := g.wait(r, res.RunID, time.Second, time.Minute); st.Status != "completed" {
		t.Fatalf("run ended %s", st.Status)
	}
	g.advanceUntil(0, 0, func() bool { return len(spansNamed(rec, "conveyor.run")) == 1 }, func() string { return "no run span" })

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if got := s.SpanContext().TraceID().String(); got != callerTraceID {
			t.Errorf("span %s in trace %s, want the caller's %s", s.Name(), got, callerTraceID)
		}
		if v, ok := spanAttr(s, "conveyor.run.id"); !ok || v.AsString() != res.RunID {
			t.Errorf("span %s: run id %q, want %s", s.Name(), v.AsString(), res.RunID)
		}
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	if len(byName["conveyor.submit"]) != 1 || len(byName["conveyor.run"]) != 1 || len(byName["conveyor.step"]) != 3 {
		t.Fatalf("spans %v, want 1 submit, 1 run, 3 step attempts", names(rec))
	}
	submit, execution := byName["conveyor.submit"][0], byName["conveyor.run"][0]
	if submit.Parent().SpanID().String() != callerSpanID || !submit.Parent().IsRemote() {
		t.Errorf("submit's parent %v, want the caller's span %s", submit.Parent().SpanID(), callerSpanID)
	}
	if execution.Parent().SpanID() != submit.SpanContext().SpanID() {
		t.Errorf("run's parent %v, want the submit's span %v", execution.Parent().SpanID(), submit.SpanContext().SpanID())
	}
	if v, _ := spanAttr(execution, "conveyor.outcome"); v.AsString() != "done" {
		t.Errorf("run's outcome %q, want done", v.AsString())
	}
	attempts := map[string]int64{}
	for _, s := range byName["conveyor.step"] {
		if s.Parent().SpanID() != execution.SpanContext().SpanID() {
			t.Errorf("step span's parent %v, want the run's %v", s.Parent().SpanID(), execution.SpanContext().SpanID())
		}
		name, _ := spanAttr(s, "conveyor.step.name")
		n, _ := spanAttr(s, "conveyor.attempt")
		attempts[name.AsString()] = max(attempts[name.AsString()], n.AsInt64())
	}
	if attempts["flaky"] != 2 || attempts["last"] != 1 {
		t.Errorf("attempts %v, want flaky 2, last 1", attempts)
	}
	// The step's context carries its attempt's span (a job it enqueues
	// joins the trace).
	mu.Lock()
	for _, sc := range inStep {
		found := false
		for _, s := range byName["conveyor.step"] {
			found = found || s.SpanContext().SpanID() == sc.SpanID()
		}
		if !found {
			t.Errorf("a step ran with span %v, none of its attempts'", sc.SpanID())
		}
	}
	mu.Unlock()
	// status.json keeps the submit's span context.
	key, err := layout.RunStatusKey(agent.Slug, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var doc lifecycle.RunStatus
	readJSON(t, g.store, key, &doc)
	if want := "00-" + callerTraceID + "-" + submit.SpanContext().SpanID().String() + "-01"; doc.TraceParent != want {
		t.Errorf("stored traceparent %q, want %q", doc.TraceParent, want)
	}
}

func names(rec *tracetest.SpanRecorder) []string {
	var out []string
	for _, s := range rec.Ended() {
		out = append(out, s.Name())
	}
	return out
}

// A run taken over by another runner (another process, with its own
// provider) continues the trace its submit stored: the new runner's
// execution is a child of the stored context, marked resumed.
func TestTakeoverContinuesTrace(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	recA, tpA := recorder(t)
	recB, tpB := recorder(t)
	const slug = "traced-orphan"
	inA := make(chan struct{}, 1)
	never := make(chan struct{})
	mk := func(owner string) run.Agent {
		work := run.Step{Name: "work", Idempotent: true, Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
			if owner == "a" {
				inA <- struct{}{}
				testSelect(ctx, never) // runner a's step ends only with its runner
				return run.StepOutput{}, ctx.Err()
			}
			return run.StepOutput{Summary: "done by b"}, nil
		}}
		return run.Agent{Slug: slug, Steps: []run.Step{work}}
	}
	a, stopA := g.runner("a", func(c *run.Config) { c.TracerProvider = tpA }, mk("a"))
	res, err := a.Submit(callerCtx(), lifecycle.SubmitRequest{AgentSlug: slug})
	if err != nil {
		t.Fatal(err)
	}
	<-inA
	stopA() // runner a is lost mid-step; its lease stays behind
	submits := spansNamed(recA, "conveyor.submit")
	if len(submits) != 1 {
		t.Fatalf("runner a's spans: %v", names(recA))
	}
	stored := submits[0].SpanContext().SpanID()

	b, _ := g.runner("b", func(c *run.Config) { c.TracerProvider = tpB }, mk("b"))
	if st := g.wait(b, res.RunID, 30*time.Second, 10*time.Minute); st.Status != "completed" || st.ResumeCount != 1 {
		t.Fatalf("after the takeover: %s, resumed %d", st.Status, st.ResumeCount)
	}
	g.advanceUntil(0, 0, func() bool { return len(spansNamed(recB, "conveyor.run")) == 1 }, func() string { return "no run span of b" })
	execution := spansNamed(recB, "conveyor.run")[0]
	if got := execution.SpanContext().TraceID().String(); got != callerTraceID {
		t.Errorf("b's run span in trace %s, want the caller's %s", got, callerTraceID)
	}
	if execution.Parent().SpanID() != stored || !execution.Parent().IsRemote() {
		t.Errorf("b's run span's parent %v, want the stored submit span %v", execution.Parent().SpanID(), stored)
	}
	if v, _ := spanAttr(execution, "conveyor.run.resumed"); !v.AsBool() {
		t.Error("b's run span is not marked resumed")
	}
	for _, s := range spansNamed(recB, "conveyor.step") {
		if s.SpanContext().TraceID().String() != callerTraceID || s.Parent().SpanID() != execution.SpanContext().SpanID() {
			t.Errorf("b's step span: trace %s, parent %v", s.SpanContext().TraceID(), s.Parent().SpanID())
		}
	}
	// Runner a's execution, stopped mid-step, ended its span "stopped".
	if runs := spansNamed(recA, "conveyor.run"); len(runs) != 1 {
		t.Errorf("runner a's run spans: %v", names(recA))
	} else if v, _ := spanAttr(runs[0], "conveyor.outcome"); v.AsString() != "stopped" {
		t.Errorf("runner a's outcome %q, want stopped", v.AsString())
	}
}

// Without a provider no span is made, but the run still keeps the trace
// context its submit carried, so a traced runner that takes it over
// continues it; a submit without one stores none (status.json as before).
func TestTraceContextWithoutProvider(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	agent := run.Agent{Slug: "untraced", Steps: []run.Step{okStep("only")}}
	r, _ := g.runner("a", nil, agent)
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"caller's trace", callerCtx(), callerParent},
		{"no trace", context.Background(), ""},
	}
	for _, tt := range tests {
		res, err := r.Submit(tt.ctx, lifecycle.SubmitRequest{AgentSlug: agent.Slug})
		if err != nil {
			t.Fatal(err)
		}
		g.wait(r, res.RunID, time.Second, time.Minute)
		key, _ := layout.RunStatusKey(agent.Slug, res.RunID)
		raw, _, err := g.store.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		var doc lifecycle.RunStatus
		readJSON(t, g.store, key, &doc)
		if doc.TraceParent != tt.want || (tt.want == "") == strings.Contains(string(raw), "traceparent") {
			t.Errorf("%s: stored traceparent %q, want %q (%s)", tt.name, doc.TraceParent, tt.want, raw)
		}
	}
}

// A run's waits show in its trace: the execution that parks it ends with a
// conveyor.wait.begin event naming what it waits for, the one that resumes
// it starts with conveyor.wait.end, timed at the answer, with how long the
// run waited and who answered.
func TestRunSpanShowsWaits(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	rec, tp := recorder(t)
	agent := run.Agent{Slug: "traced-wait", Machine: lifecycle.MachineApproval, Steps: []run.Step{
		awaitStep("plan", &run.Await{Approval: "merge"}),
		awaitStep("push", &run.Await{ExternalEvent: "ci.finished"}), okStep("done")}}
	r, _ := g.runner("a", func(c *run.Config) { c.TracerProvider = tp }, agent)
	ctx := context.Background()
	id := submit(t, r, agent.Slug)
	g.wait(r, id, 0, 0)
	g.clock.Advance(time.Hour)
	decided := g.clock.Now()
	if _, err := r.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	g.wait(r, id, 0, 0)
	g.clock.Advance(time.Minute)
	if _, err := r.Deliver(ctx, id, lifecycle.ActorGateway, run.ExternalEvent{Type: "ci.finished", Source: "github"}); err != nil {
		t.Fatal(err)
	}
	if st := g.wait(r, id, 0, 0); st.Status != "completed" {
		t.Fatalf("run %s", st.Status)
	}
	var spans []sdktrace.ReadOnlySpan
	until(t, "three run spans", func() bool { spans = spansNamed(rec, "conveyor.run"); return len(spans) == 3 })
	type ev struct {
		name, kind, what, by string
		ms                   int64
	}
	events := func(s sdktrace.ReadOnlySpan) []ev {
		var out []ev
		for _, e := range s.Events() {
			x := ev{name: e.Name}
			for _, kv := range e.Attributes {
				switch kv.Key {
				case "conveyor.wait.kind":
					x.kind = kv.Value.AsString()
				case "conveyor.wait.name":
					x.what = kv.Value.AsString()
				case "conveyor.wait.answered_by":
					x.by = kv.Value.AsString()
				case "conveyor.wait.duration_ms":
					x.ms = kv.Value.AsInt64()
				}
			}
			if e.Name == "conveyor.wait.end" && x.kind == "approval" && !e.Time.Equal(decided) {
				t.Errorf("the approval's end at %v, want %v", e.Time, decided)
			}
			out = append(out, x)
		}
		return out
	}
	want := [][]ev{
		{{"conveyor.wait.begin", "approval", "merge", "", 0}},
		{{"conveyor.wait.end", "approval", "merge", "owner", time.Hour.Milliseconds()}, {"conveyor.wait.begin", "external_event", "ci.finished", "", 0}},
		{{"conveyor.wait.end", "external_event", "ci.finished", "github", time.Minute.Milliseconds()}},
	}
	for i, s := range spans {
		if got := events(s); fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Errorf("execution %d: events %v, want %v", i+1, got, want[i])
		}
	}
}
