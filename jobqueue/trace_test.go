package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

const (
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID  = "00f067aa0ba902b7"
)

func traceRecorder(t *testing.T) (*tracetest.SpanRecorder, trace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

func attrOf(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func spansOf(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// A job enqueued within a caller's trace keeps its context: the enqueue's
// span is the caller's child, and each attempt, the retry on another
// Queue (another process, its own provider) too, is a job span that
// continues the stored context, its handlers' spans its children, all with
// the job's id.
func TestJobSpans(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	clk := clock.NewFake(time.Date(2026, 2, 24, 9, 0, 0, 0, time.UTC))
	recA, tpA := traceRecorder(t)
	recB, tpB := traceRecorder(t)
	qa := newQueue(t, store, clk, func(c *jobqueue.Config) { c.TracerProvider = tpA })
	qb := newQueue(t, store, clk, func(c *jobqueue.Config) { c.TracerProvider = tpB })
	ctx := propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": "00-" + callerTraceID + "-" + callerSpanID + "-01"})
	job, err := qa.Enqueue(ctx, lifecycle.ActorGateway, spec("traced-job", "agent-t"))
	if err != nil {
		t.Fatal(err)
	}
	enq := spansOf(recA, "conveyor.enqueue")
	if len(enq) != 1 || enq[0].Parent().SpanID().String() != callerSpanID || enq[0].SpanContext().TraceID().String() != callerTraceID {
		t.Fatalf("enqueue spans %v", enq)
	}
	semconv := func(what string, s sdktrace.ReadOnlySpan, op string) {
		t.Helper()
		// OpenTelemetry's messaging conventions, by their wire names.
		if attrOf(s, "messaging.system") != "conveyor" || attrOf(s, "messaging.operation.type") != op || attrOf(s, "messaging.destination.name") != "agent-t" {
			t.Errorf("%s span's messaging attributes: %v", what, s.Attributes())
		}
	}
	semconv("enqueue", enq[0], "send")
	if want := "00-" + callerTraceID + "-" + enq[0].SpanContext().SpanID().String() + "-01"; job.TraceParent != want || get(t, qa, job.JobID).TraceParent != want {
		t.Fatalf("job's traceparent %q, want %q", job.TraceParent, want)
	}

	failing := jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{}, errors.New("unavailable")
	}}
	tests := []struct {
		name     string
		q        *jobqueue.Queue
		rec      *tracetest.SpanRecorder
		h        jobqueue.Handlers
		outcome  lifecycle.JobState
		advance  time.Duration
		failed   bool
		handlers int
	}{
		{"first attempt fails", qa, recA, failing, lifecycle.JobRetryBackoff, 0, true, 1},
		{"retry on another queue", qb, recB, okHandlers(), lifecycle.JobComplete, time.Minute, false, 0},
	}
	for _, tt := range tests {
		clk.Advance(tt.advance)
		c, err := tt.q.Claim(context.Background(), "w-"+tt.name[:5])
		if err != nil || c == nil {
			t.Fatalf("%s: claim %v, %v", tt.name, c, err)
		}
		j, err := c.Run(context.Background(), tt.h)
		if err != nil || j.Status != tt.outcome {
			t.Fatalf("%s: ran to %s, %v; want %s", tt.name, j.Status, err, tt.outcome)
		}
		jobs := spansOf(tt.rec, "conveyor.job")
		if len(jobs) != 1 {
			t.Fatalf("%s: %d job spans", tt.name, len(jobs))
		}
		js := jobs[0]
		if js.SpanContext().TraceID().String() != callerTraceID || js.Parent().SpanID() != enq[0].SpanContext().SpanID() || !js.Parent().IsRemote() {
			t.Errorf("%s: job span in trace %s under %v, want the caller's trace under the stored enqueue span %v",
				tt.name, js.SpanContext().TraceID(), js.Parent().SpanID(), enq[0].SpanContext().SpanID())
		}
		if attrOf(js, "conveyor.job.id") != job.JobID || attrOf(js, "conveyor.outcome") != string(tt.outcome) {
			t.Errorf("%s: job span attributes %v", tt.name, js.Attributes())
		}
		semconv(tt.name+": job", js, "process")
		if failed := js.Status().Code == otelcodes.Error; failed != tt.failed {
			t.Errorf("%s: job span status %v, want failed %v", tt.name, js.Status(), tt.failed)
		}
		hs := spansOf(tt.rec, "conveyor.handler")
		if len(hs) == 0 {
			t.Errorf("%s: no handler spans", tt.name)
		}
		for _, h := range hs {
			if h.Parent().SpanID() != js.SpanContext().SpanID() || attrOf(h, "conveyor.job.id") != job.JobID || attrOf(h, "conveyor.handler") == "" {
				t.Errorf("%s: handler span %s under %v: %v", tt.name, attrOf(h, "conveyor.handler"), h.Parent().SpanID(), h.Attributes())
			}
		}
		if n := len(hs) - countStatus(hs); n < tt.handlers {
			t.Errorf("%s: %d failed handler spans, want %d", tt.name, n, tt.handlers)
		}
	}
}

// countStatus counts the spans without an error status.
func countStatus(spans []sdktrace.ReadOnlySpan) int {
	n := 0
	for _, s := range spans {
		if s.Status().Code != otelcodes.Error {
			n++
		}
	}
	return n
}

// TestBatchSpans: each job of a batch has its conveyor.enqueue span, a
// child of the caller's, naming the job, and its record keeps that span's
// context, on the path that commits and on the one that writes a job at a
// time; a failed batch's spans are failed.
func TestBatchSpans(t *testing.T) {
	t.Parallel()
	for _, sc := range []storeCase{stores[0], {"filestore", fileStore}} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			rec, tp := traceRecorder(t)
			q := newQueue(t, sc.new(t), clock.NewFake(t0), func(c *jobqueue.Config) { c.TracerProvider = tp })
			ctx := propagation.TraceContext{}.Extract(context.Background(),
				propagation.MapCarrier{"traceparent": "00-" + callerTraceID + "-" + callerSpanID + "-01"})
			jobs, err := q.EnqueueMany(ctx, lifecycle.ActorGateway, batchOf(3, "a"))
			if err != nil {
				t.Fatal(err)
			}
			enq := spansOf(rec, "conveyor.enqueue")
			if len(enq) != 3 {
				t.Fatalf("%d enqueue spans, want 3", len(enq))
			}
			for i, s := range enq {
				want := "00-" + callerTraceID + "-" + s.SpanContext().SpanID().String() + "-01"
				if s.Parent().SpanID().String() != callerSpanID || attrOf(s, "conveyor.job.id") != jobs[i].JobID ||
					get(t, q, jobs[i].JobID).TraceParent != want {
					t.Fatalf("span %d: parent %s, job %q; job %s's traceparent %q, want %q", i, s.Parent().SpanID(),
						attrOf(s, "conveyor.job.id"), jobs[i].JobID, get(t, q, jobs[i].JobID).TraceParent, want)
				}
			}
			if _, err := q.EnqueueMany(ctx, lifecycle.ActorGateway, batchOf(2, "a")); !errors.Is(err, lifecycle.ErrJobExists) {
				t.Fatalf("the batch again = %v", err)
			}
			failed := spansOf(rec, "conveyor.enqueue")[3]
			if failed.Status().Code != otelcodes.Error {
				t.Fatalf("a failed batch's span: %v", failed.Status())
			}
		})
	}
}

// TestGeneralJobSpans: a job of a user's type runs on its own machine in
// its spans too: its handler span is "Work", never an NLM step's, and its
// job span's outcome is its machine's state.
func TestGeneralJobSpans(t *testing.T) {
	t.Parallel()
	rec, tp := traceRecorder(t)
	clk := clock.NewFake(t0)
	q := emailQueue(t, clk, jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("no such mailbox"))
	}), func(c *jobqueue.Config) { c.TracerProvider = tp })
	enqueueEmail(t, q, "job-e", 3)
	j, err := claim(t, q, "w1").Run(context.Background(), nil)
	if err != nil || j.Status != lifecycle.JobDead || j.FailedStep != lifecycle.JobRunning {
		t.Fatalf("ran to %s in %s, %v; want DEAD, failed in RUNNING", j.Status, j.FailedStep, err)
	}
	jobs := spansOf(rec, "conveyor.job")
	if len(jobs) != 1 || attrOf(jobs[0], "conveyor.outcome") != string(lifecycle.JobDead) || jobs[0].Status().Code != otelcodes.Error {
		t.Fatalf("job spans %v", jobs)
	}
	var names []string
	for _, h := range spansOf(rec, "conveyor.handler") {
		names = append(names, attrOf(h, "conveyor.handler"))
	}
	if len(names) != 1 || names[0] != "Work" {
		t.Errorf("handler spans %v, want one Work", names)
	}
}
