package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

const (
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID  = "00f067aa0ba902b7"
	callerParent  = "00-" + callerTraceID + "-" + callerSpanID + "-01"
)

func attrOf(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// post sends a JSON POST as the gateway (a loopback client without a
// token) with a traceparent header, and decodes the answer into v.
func post(t *testing.T, url, traceparent string, body, v any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest("POST", url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

// A run submitted over HTTP with a traceparent header is traced in the
// caller's trace: the server span is the caller's child, the submit the
// server's, the execution the submit's, the step attempts the
// execution's, all with the run's id; a job enqueued likewise keeps the
// caller's trace under the POST /jobs span.
func TestHTTPTraceparent(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	store := memstore.New()
	log := slog.New(slog.DiscardHandler)
	runner, err := run.NewRunner(run.Config{Store: store, Owner: "trace", Logger: log, TracerProvider: tp},
		run.Agent{Slug: "quick", Steps: []run.Step{quickStep("load"), quickStep("write")}})
	if err != nil {
		t.Fatal(err)
	}
	queue, err := jobqueue.New(jobqueue.Config{Store: store, Logger: log, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	s, err := httpapi.New(httpapi.Config{Runner: runner, Queue: queue, Logger: log, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() { done <- runner.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	var sub struct {
		RunID string `json:"run_id"`
	}
	post(t, srv.URL+"/agents/run", callerParent, map[string]any{"agent_slug": "quick"}, &sub)
	if st, err := runner.Wait(ctx, sub.RunID); err != nil || st.Status != "completed" {
		t.Fatalf("run: %+v, %v", st, err)
	}
	var job lifecycle.Job
	post(t, srv.URL+"/jobs", callerParent, map[string]any{"run_id": sub.RunID, "job_type": "BRIEF", "agent_slug": "quick"}, &job)

	// The execution's span ends just after the status that completes the
	// run; no clock event marks it, so the test polls.
	spans := map[string][]sdktrace.ReadOnlySpan{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		clear(spans)
		for _, sp := range rec.Ended() {
			spans[sp.Name()] = append(spans[sp.Name()], sp)
		}
		if len(spans["conveyor.run"]) == 1 || time.Now().After(deadline) {
			break
		}
	}
	one := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		if len(spans[name]) != 1 {
			t.Fatalf("%d %s spans, want 1 (%v)", len(spans[name]), name, spans)
		}
		return spans[name][0]
	}
	server, submit, execution := one("POST /agents/run"), one("conveyor.submit"), one("conveyor.run")
	jobServer, enqueue := one("POST /jobs"), one("conveyor.enqueue")
	tests := []struct {
		span   sdktrace.ReadOnlySpan
		parent trace.SpanID
		kind   trace.SpanKind
		runID  bool
	}{
		{server, spanID(t, callerSpanID), trace.SpanKindServer, false},
		{submit, server.SpanContext().SpanID(), trace.SpanKindInternal, true},
		{execution, submit.SpanContext().SpanID(), trace.SpanKindInternal, true},
		{jobServer, spanID(t, callerSpanID), trace.SpanKindServer, false},
		{enqueue, jobServer.SpanContext().SpanID(), trace.SpanKindProducer, false},
	}
	for _, sp := range spans["conveyor.step"] {
		tests = append(tests, struct {
			span   sdktrace.ReadOnlySpan
			parent trace.SpanID
			kind   trace.SpanKind
			runID  bool
		}{sp, execution.SpanContext().SpanID(), trace.SpanKindInternal, true})
	}
	if len(spans["conveyor.step"]) != 2 {
		t.Errorf("%d step spans, want 2", len(spans["conveyor.step"]))
	}
	for _, tt := range tests {
		sp := tt.span
		if sp.SpanContext().TraceID().String() != callerTraceID || sp.Parent().SpanID() != tt.parent || sp.SpanKind() != tt.kind {
			t.Errorf("%s: trace %s, parent %v, kind %v; want trace %s, parent %v, kind %v", sp.Name(),
				sp.SpanContext().TraceID(), sp.Parent().SpanID(), sp.SpanKind(), callerTraceID, tt.parent, tt.kind)
		}
		if tt.runID && attrOf(sp, "conveyor.run.id") != sub.RunID {
			t.Errorf("%s: run id %q, want %s", sp.Name(), attrOf(sp, "conveyor.run.id"), sub.RunID)
		}
	}
	// OpenTelemetry's HTTP conventions on the server spans, by their wire names.
	for _, sp := range []sdktrace.ReadOnlySpan{server, jobServer} {
		route := strings.TrimPrefix(sp.Name(), "POST ")
		if attrOf(sp, "http.request.method") != "POST" || attrOf(sp, "url.path") != route || attrOf(sp, "http.route") != route ||
			!strings.HasPrefix(attrOf(sp, "http.response.status_code"), "20") {
			t.Errorf("%s: HTTP attributes %v", sp.Name(), sp.Attributes())
		}
	}
	if attrOf(enqueue, "conveyor.job.id") != job.JobID {
		t.Errorf("enqueue span's job id %q, want %s", attrOf(enqueue, "conveyor.job.id"), job.JobID)
	}
	if want := "00-" + callerTraceID + "-" + enqueue.SpanContext().SpanID().String() + "-01"; job.TraceParent != want {
		t.Errorf("job's traceparent %q, want %q", job.TraceParent, want)
	}
}

func spanID(t *testing.T, s string) trace.SpanID {
	t.Helper()
	id, err := trace.SpanIDFromHex(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The Go client sends its context's trace: a run it submits within a
// caller's span keeps that trace, with no provider anywhere.
func TestClientSendsTrace(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": callerParent})
	res, err := g.client(lifecycle.ActorGateway).Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := g.runner.Status(context.Background(), res.RunID)
	if err != nil || st.TraceParent != callerParent {
		t.Errorf("run's traceparent %q (%v), want %q", st.TraceParent, err, callerParent)
	}
}
