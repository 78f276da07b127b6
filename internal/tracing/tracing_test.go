package tracing_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/internal/tracing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Without a provider (nil or the noop one), starting, annotating and
// ending a span, and reading the trace context of a context without one,
// allocate nothing.
func TestNoProviderAllocatesNothing(t *testing.T) {
	// Not parallel: AllocsPerRun counts every goroutine's allocations.
	for _, tp := range []trace.TracerProvider{nil, noop.NewTracerProvider()} {
		tr := tracing.New(tp)
		if tr.Enabled() {
			t.Fatalf("New(%T) is enabled", tp)
		}
		ctx := context.Background()
		boom := errors.New("boom")
		allocs := testing.AllocsPerRun(1000, func() {
			sctx, span := tr.Start(ctx, tracing.SpanRun, trace.SpanKindInternal)
			span.String(tracing.AttrRunID, "run_x")
			span.Int(tracing.AttrAttempt, 2)
			span.Bool(tracing.AttrResumed, true)
			span.Fail("failed")
			span.End(boom)
			if sctx != ctx || tracing.TraceParent(sctx) != "" || tracing.Continue(sctx, "") != ctx {
				t.Fatal("the no-provider path changed the context")
			}
		})
		if allocs != 0 {
			t.Errorf("%T: %v allocations per span, want none", tp, allocs)
		}
	}
}

// A stored traceparent continues its trace: spans started on Continue's
// context are its children, and TraceParent gives a span's own back.
// Garbage leaves the context as it was.
func TestContinue(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.New(tp)
	tests := []struct {
		name, in  string
		continues bool
	}{
		{"valid", parent, true},
		{"empty", "", false},
		{"garbage", "not a traceparent", false},
		{"huge", strings.Repeat("0", 1<<16), false},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := tracing.Continue(context.Background(), tt.in)
			if got := tracing.Valid(tt.in); got != tt.continues {
				t.Errorf("Valid = %v, want %v", got, tt.continues)
			}
			sctx, span := tr.Start(ctx, tracing.SpanStep, trace.SpanKindInternal)
			span.End(nil)
			sc := trace.SpanContextFromContext(sctx)
			continued := sc.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736"
			if continued != tt.continues {
				t.Errorf("trace %s: continued %v, want %v", sc.TraceID(), continued, tt.continues)
			}
			tp := tracing.TraceParent(sctx)
			if !strings.HasPrefix(tp, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()) {
				t.Errorf("TraceParent = %q, want the span's own", tp)
			}
		})
	}
}

// End records an error as the span's status; Fail sets one without.
func TestSpanStatus(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.New(tp)
	_, ok := tr.Start(context.Background(), "ok", trace.SpanKindInternal)
	ok.End(nil)
	_, bad := tr.Start(context.Background(), "bad", trace.SpanKindInternal)
	bad.End(errors.New("boom"))
	_, failed := tr.Start(context.Background(), "failed", trace.SpanKindInternal)
	failed.Fail("RUN_FAILED: x")
	failed.End(nil)
	want := map[string]codes.Code{"ok": codes.Unset, "bad": codes.Error, "failed": codes.Error}
	for _, s := range rec.Ended() {
		if s.Status().Code != want[s.Name()] {
			t.Errorf("%s: status %v, want %v", s.Name(), s.Status().Code, want[s.Name()])
		}
	}
}

// FromRequest reads the caller's traceparent header, unless the context
// carries a span already; Inject writes it back.
func TestFromRequest(t *testing.T) {
	t.Parallel()
	r, _ := http.NewRequest("POST", "http://127.0.0.1/agents/run", nil)
	if ctx := tracing.FromRequest(r); ctx != r.Context() {
		t.Error("a request without the header got a new context")
	}
	r.Header.Set("traceparent", parent)
	ctx := tracing.FromRequest(r)
	if got := tracing.TraceParent(ctx); got != parent {
		t.Errorf("TraceParent = %q, want %q", got, parent)
	}
	h := http.Header{}
	tracing.Inject(ctx, h)
	if h.Get("traceparent") != parent {
		t.Errorf("Inject wrote %q", h.Get("traceparent"))
	}
	// A server span in front wins over the header.
	other := tracing.Continue(context.Background(), "00-11111111111111111111111111111111-2222222222222222-01")
	if got := tracing.TraceParent(tracing.FromRequest(r.WithContext(other))); !strings.Contains(got, "1111") {
		t.Errorf("FromRequest replaced the context's span: %q", got)
	}
}
