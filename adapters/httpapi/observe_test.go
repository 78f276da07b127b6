package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// metricsServer is a real server on 127.0.0.1 counting its requests into
// a registry it serves at /metrics.
func metricsServer(t *testing.T, store *storage.Store, log *slog.Logger, timeout time.Duration) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	runner, err := run.NewRunner(run.Config{Store: store, Logger: slog.New(slog.DiscardHandler)}, run.Agent{Slug: "quick", Steps: []run.Step{quickStep("load")}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := httpapi.Config{Runner: runner, Logger: log, Registerer: reg, RequestTimeout: timeout,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})}
	srv, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A second Server on the registry shares its metrics (a restart).
	if _, err := httpapi.New(cfg); err != nil {
		t.Fatalf("a second Server on one registry: %v", err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts, reg
}

// send sends method path as the admin (a loopback client without a token)
// and returns the status.
func send(ctx context.Context, t *testing.T, ts *httptest.Server, method, path string) (int, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Conveyor-Actor", "admin")
	resp, err := ts.Client().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func scrapeText(t *testing.T, ts *httptest.Server) string {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.URL+"/metrics", nil)
	req.Header.Set("X-Conveyor-Actor", "admin")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// TestRequestMetrics: requests are counted and timed by method, route
// pattern and status; raw paths and unknown methods never become labels.
func TestRequestMetrics(t *testing.T) {
	t.Parallel()
	ts, _ := metricsServer(t, storage.New(memstore.New()), slog.New(slog.DiscardHandler), 0)
	ctx := context.Background()
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/runs/run-a/status", 404},
		{"GET", "/runs/run-b/status", 404},
		{"GET", "/healthz", 200},
		{"GET", "/no/such/route-xyz", 404},
		{"BREW", "/healthz", 405},
	} {
		if got, err := send(ctx, t, ts, tc.method, tc.path); err != nil || got != tc.status {
			t.Fatalf("%s %s: %d %v, want %d", tc.method, tc.path, got, err, tc.status)
		}
	}
	text := scrapeText(t, ts)
	for _, want := range []string{
		`conveyor_http_requests_total{method="GET",route="/runs/{runId}/status",status="404"} 2`,
		`conveyor_http_requests_total{method="GET",route="/healthz",status="200"} 1`,
		`conveyor_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`conveyor_http_requests_total{method="_OTHER",route="/healthz",status="405"} 1`,
		`conveyor_http_request_duration_seconds_count{method="GET",route="/runs/{runId}/status",status="404"} 2`,
		`conveyor_http_request_duration_seconds_bucket{method="GET",route="/healthz",status="200",le="+Inf"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, raw := range []string{"run-a", "route-xyz", "BREW"} {
		if strings.Contains(text, raw) {
			t.Errorf("/metrics has a raw value %q as a label", raw)
		}
	}
	// The Client's Go and process collectors are not the Server's: none here.
	if strings.Contains(text, "go_goroutines") {
		t.Error("the Server registered the Go collector")
	}
}

// TestClientGoneIsInfo: a request whose client went away while the store
// was down is logged at INFO as cancelled (status 499), not as a server
// error, and counted as 499.
func TestClientGoneIsInfo(t *testing.T) {
	t.Parallel()
	store := faultstore.New(memstore.New())
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ts, _ := metricsServer(t, storage.New(store), log, 30*time.Second)
	store.Down()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := send(ctx, t, ts, "GET", "/runs/run-gone/status"); err == nil {
		t.Fatal("the request was answered while the store was down")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "http_request_canceled") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	l := logs.String()
	if !strings.Contains(l, "level=INFO msg=http_request_canceled") || !strings.Contains(l, "status=499") || !strings.Contains(l, "route=/runs/{runId}/status") {
		t.Errorf("the gone client was not logged at INFO with 499:\n%s", l)
	}
	if strings.Contains(l, "level=ERROR") {
		t.Errorf("the gone client was logged as an error:\n%s", l)
	}
	store.Up()
	if text := scrapeText(t, ts); !strings.Contains(text, `conveyor_http_requests_total{method="GET",route="/runs/{runId}/status",status="499"} 1`+"\n") {
		t.Errorf("the gone client was not counted as 499:\n%s", grep(text, "conveyor_http_requests_total"))
	}
}

func grep(text, prefix string) string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
