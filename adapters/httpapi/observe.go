package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
)

// statusClientGone is the status a request is logged and counted with when
// its client went away before the answer (nginx's 499): whatever the
// server wrote then reached no one, and it is no failure of the server's.
const statusClientGone = 499

// routeUnmatched is the route label of a request no route matched (404,
// or a redirect of the mux's): raw paths would make the label unbounded.
const routeUnmatched = "unmatched"

// httpMetrics counts the server's requests by method, route pattern and
// status (Config.Registerer). Every label is bounded: methods outside
// HTTP's own are _OTHER, routes are the table's patterns.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// newHTTPMetrics registers the request metrics with reg; none without reg.
// A registry that holds them already (another Server's, a restarted
// one's) is shared, not refused.
func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	labels := []string{"method", "route", "status"}
	requests, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "conveyor_http_requests_total",
		Help: "HTTP requests served, by method, route pattern and status (499: the client went away)."}, labels))
	if err != nil {
		return nil, err
	}
	duration, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "conveyor_http_request_duration_seconds",
		Help:    "HTTP request latency, by method, route pattern and status; an event stream's is its connection's life.",
		Buckets: prometheus.DefBuckets}, labels))
	if err != nil {
		return nil, err
	}
	return &httpMetrics{requests: requests, duration: duration}, nil
}

// register registers c with reg, or returns the collector reg holds
// already under c's description.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func (m *httpMetrics) observe(method, route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	s := strconv.Itoa(status)
	m.requests.WithLabelValues(method, route, s).Inc()
	m.duration.WithLabelValues(method, route, s).Observe(d.Seconds())
}

// methodLabel is r's method, or _OTHER (as OpenTelemetry's conventions
// say) for one HTTP does not define: a client picks the method.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// routeOf is the path of the route pattern that serves r ("/runs/{runId}"),
// routeUnmatched when none does.
func (s *Server) routeOf(r *http.Request) string {
	_, pattern := s.mux.Handler(r)
	if _, path, ok := strings.Cut(pattern, " "); ok {
		pattern = path
	}
	if pattern == "" || pattern == "/" {
		return routeUnmatched
	}
	return pattern
}

// served logs and counts an answered request. A request whose client went
// away (its context cancelled, not timed out) is logged at INFO as
// http_request_canceled with status 499, whatever the handler wrote (its
// SDK call ended with the context, which the code table calls a 500); a
// failed one (4xx at DEBUG, 5xx at ERROR) as http_request_failed.
func (s *Server) served(r *http.Request, rec *recorder, route string, actor lifecycle.Actor, start time.Time) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	gone := errors.Is(r.Context().Err(), context.Canceled)
	if gone {
		status = statusClientGone
	}
	// Counted before it is logged: a test that saw the line reads the count.
	s.metrics.observe(methodLabel(r.Method), route, status, time.Since(start))
	if gone {
		s.log.Info("http_request_canceled", "method", r.Method, "path", r.URL.Path, "route", route, "status", status,
			"written", rec.status, "actor", string(actor), "message", "the client went away (closed its connection or cancelled the request) before the answer")
	} else if status >= 400 {
		level := slog.LevelDebug
		if status >= 500 {
			level = slog.LevelError
		}
		s.log.Log(r.Context(), level, "http_request_failed", "method", r.Method, "path", r.URL.Path,
			"status", status, "code", rec.code, "actor", string(actor), "message", rec.message)
	}
}

// spanEnd sets a server span's response status and ends it: w is the
// recorder ServeHTTP serves through.
func spanEnd(span tracing.Span, w http.ResponseWriter) {
	status := http.StatusOK
	if rec, ok := w.(*recorder); ok && rec.status != 0 {
		status = rec.status
	}
	span.Int(tracing.AttrHTTPStatus, int64(status))
	if status >= 500 {
		span.Fail(http.StatusText(status))
	}
	span.End(nil)
}
