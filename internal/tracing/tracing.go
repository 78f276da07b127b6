// Package tracing is the SDK's one use of OpenTelemetry: the spans of
// submits, runs, step attempts, jobs and handlers, and the W3C traceparent
// a record keeps so that whichever process executes it continues its
// caller's trace (docs/spec.md#tracing).
//
// A Tracer made from no TracerProvider does nothing and allocates nothing:
// its spans are zero values whose methods return at once. Only the
// OpenTelemetry API is imported here; the SDK and exporters are the
// program's choice.
package tracing

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of the SDK's spans.
const Scope = "github.com/runconveyor/conveyor"

// Span names.
const (
	SpanSubmit  = "conveyor.submit"
	SpanRun     = "conveyor.run"
	SpanStep    = "conveyor.step"
	SpanEnqueue = "conveyor.enqueue"
	SpanJob     = "conveyor.job"
	SpanHandler = "conveyor.handler"
)

// Attribute keys.
const (
	AttrRunID   = "conveyor.run.id"
	AttrAgent   = "conveyor.agent.slug"
	AttrStep    = "conveyor.step.name"
	AttrStepNum = "conveyor.step.number"
	AttrAttempt = "conveyor.attempt"
	AttrJobID   = "conveyor.job.id"
	AttrJobType = "conveyor.job.type"
	AttrHandler = "conveyor.handler"
	AttrResumed = "conveyor.run.resumed"
	AttrOutcome = "conveyor.outcome"
	AttrEpoch   = "conveyor.lease.epoch"
	// The attributes of a run span's wait events.
	AttrWaitKind  = "conveyor.wait.kind" // "approval" or "external_event"
	AttrWaitName  = "conveyor.wait.name" // the approval's action, the event's type
	AttrWaitSince = "conveyor.wait.since"
	AttrWaitMS    = "conveyor.wait.duration_ms"
	AttrWaitBy    = "conveyor.wait.answered_by" // who decided, the event's source
)

// The events on a run's span that show its waits: an execution that parks
// the run ends with the first, the execution that resumes it starts with
// the second, timed when the wait was answered.
const (
	EventWaitBegin = "conveyor.wait.begin"
	EventWaitEnd   = "conveyor.wait.end"
)

// OpenTelemetry's semantic conventions (the semconv version imported here)
// on the server spans of the HTTP API and the spans of jobs, so tools that
// read them (HTTP and messaging dashboards) read Conveyor's.
const (
	AttrHTTPRoute  = string(semconv.HTTPRouteKey)
	AttrHTTPMethod = string(semconv.HTTPRequestMethodKey)
	AttrHTTPStatus = string(semconv.HTTPResponseStatusCodeKey)
	AttrURLPath    = string(semconv.URLPathKey)

	AttrMessagingSystem      = string(semconv.MessagingSystemKey)
	AttrMessagingOperation   = string(semconv.MessagingOperationTypeKey)
	AttrMessagingDestination = string(semconv.MessagingDestinationNameKey)
	// MessagingSystem is the messaging.system of job spans: no value of
	// the conventions' list fits, and they allow a system's own name.
	MessagingSystem = "conveyor"
)

// The messaging.operation.type of the enqueue span (a job sent to its
// lane) and of the job span (an attempt processing it).
var (
	MessagingSend    = semconv.MessagingOperationTypeSend.Value.AsString()
	MessagingProcess = semconv.MessagingOperationTypeProcess.Value.AsString()
)

// Tracer starts the SDK's spans; the zero Tracer starts none.
type Tracer struct{ t trace.Tracer }

// New returns the Tracer of tp; nil (or OpenTelemetry's noop provider)
// gives the zero Tracer, which costs nothing.
func New(tp trace.TracerProvider) Tracer {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return Tracer{}
	}
	return Tracer{t: tp.Tracer(Scope)}
}

// Enabled tells whether the Tracer records spans.
func (t Tracer) Enabled() bool { return t.t != nil }

// Start starts a span named name as a child of the span in ctx. Without a
// provider it returns ctx itself and the zero Span.
func (t Tracer) Start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, Span) {
	if t.t == nil {
		return ctx, Span{}
	}
	ctx, s := t.t.Start(ctx, name, trace.WithSpanKind(kind))
	return ctx, Span{s: s}
}

// Span is a started span, or the zero Span of a Tracer without provider.
type Span struct{ s trace.Span }

// String sets a string attribute.
func (s Span) String(key, value string) {
	if s.s != nil {
		s.s.SetAttributes(attribute.String(key, value))
	}
}

// Int sets an integer attribute.
func (s Span) Int(key string, value int64) {
	if s.s != nil {
		s.s.SetAttributes(attribute.Int64(key, value))
	}
}

// Bool sets a boolean attribute.
func (s Span) Bool(key string, value bool) {
	if s.s != nil {
		s.s.SetAttributes(attribute.Bool(key, value))
	}
}

// WaitBegins records on a run's span that the run parks at now, waiting
// for kind (an approval, an external event) named name.
func (s Span) WaitBegins(kind, name string) {
	if s.s != nil {
		s.s.AddEvent(EventWaitBegin, trace.WithAttributes(attribute.String(AttrWaitKind, kind), attribute.String(AttrWaitName, name)))
	}
}

// WaitEnded records on a run's span the wait the execution resumes from:
// parked since, answered at (the event's time) by by.
func (s Span) WaitEnded(kind, name string, since, at time.Time, by string) {
	if s.s != nil {
		s.s.AddEvent(EventWaitEnd, trace.WithTimestamp(at), trace.WithAttributes(
			attribute.String(AttrWaitKind, kind), attribute.String(AttrWaitName, name),
			attribute.String(AttrWaitSince, since.UTC().Format(time.RFC3339Nano)),
			attribute.Int64(AttrWaitMS, at.Sub(since).Milliseconds()), attribute.String(AttrWaitBy, by)))
	}
}

// End ends the span; a non-nil err marks it failed.
func (s Span) End(err error) {
	if s.s == nil {
		return
	}
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// Fail marks the span failed with a description (an outcome that is no Go
// error: a run that failed, a job sent to retry).
func (s Span) Fail(desc string) {
	if s.s != nil {
		s.s.SetStatus(codes.Error, desc)
	}
}

// HeaderTraceParent is the W3C Trace Context header a caller sends.
const HeaderTraceParent = "traceparent"

var w3c = propagation.TraceContext{}

// one carries a lone traceparent through the propagator without a map.
type one struct{ v string }

func (c *one) Get(key string) string {
	if key == HeaderTraceParent {
		return c.v
	}
	return ""
}

func (c *one) Set(key, value string) {
	if key == HeaderTraceParent {
		c.v = value
	}
}

func (c *one) Keys() []string { return []string{HeaderTraceParent} }

// TraceParent is the W3C traceparent of the span context in ctx, "" when
// ctx carries none. A record stores it so the process that executes the
// record continues the trace of the one that created it.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c one
	w3c.Inject(ctx, &c)
	return c.v
}

// Continue returns ctx carrying the remote span context of traceparent, so
// spans started on it join that trace as its children. An empty or
// malformed traceparent leaves ctx as it is (a bad stored value never
// stops the work it describes).
func Continue(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return w3c.Extract(ctx, &one{v: traceparent})
}

// Valid tells whether s is a well-formed W3C traceparent.
func Valid(s string) bool {
	return trace.SpanContextFromContext(Continue(context.Background(), s)).IsValid()
}

// FromRequest returns the request's context carrying the caller's trace
// context (its traceparent and tracestate headers), unless that context
// carries a span already (a server in front started one). A request
// without the header, or with a malformed one, gets its context as is.
func FromRequest(r *http.Request) context.Context {
	ctx := r.Context()
	if r.Header.Get(HeaderTraceParent) == "" || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return w3c.Extract(ctx, propagation.HeaderCarrier(r.Header))
}

// Inject writes the trace context of ctx into h (a client's request).
func Inject(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		w3c.Inject(ctx, propagation.HeaderCarrier(h))
	}
}
