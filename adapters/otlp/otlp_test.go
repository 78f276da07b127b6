package otlp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFromEnv: without an endpoint there is no provider (and a shutdown
// that does nothing); with one, a span ends up posted to it at shutdown.
func TestFromEnv(t *testing.T) {
	ctx := context.Background()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tp, shutdown, err := FromEnv(ctx, "test")
	if err != nil || tp != nil || shutdown(ctx) != nil {
		t.Fatalf("without an endpoint: %v, %v, want no provider", tp, err)
	}

	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	tp, shutdown, err = FromEnv(ctx, "test")
	if err != nil || tp == nil {
		t.Fatalf("with an endpoint: %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(ctx, "span")
	span.End()
	// A context already past its deadline: the flush gets its second.
	ended, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Minute))
	defer cancel()
	if err := shutdown(ended); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no span was posted")
	}
}
