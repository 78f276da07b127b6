package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// TestFailuresAreLogged: a 4xx is logged at DEBUG, a 5xx (the store down
// for the request's deadline: UPSTREAM_UNAVAILABLE) at ERROR.
func TestFailuresAreLogged(t *testing.T) {
	t.Parallel()
	store := faultstore.New(memstore.New())
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runner, err := run.NewRunner(run.Config{Store: storage.New(store), Logger: slog.New(slog.DiscardHandler)}, run.Agent{Slug: "quick", Steps: []run.Step{quickStep("load")}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Runner: runner, Logger: log, RequestTimeout: 50 * time.Millisecond,
		Tokens: map[string]lifecycle.Actor{"t": lifecycle.ActorGateway}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c := &client.Client{BaseURL: ts.URL, Token: "t", HTTP: ts.Client()}
	ctx := context.Background()

	_, err = c.Status(ctx, "run-nope")
	apiError(t, err, http.StatusNotFound, codes.RunNotFound)
	if l := logs.String(); !strings.Contains(l, "level=DEBUG msg=http_request_failed") || !strings.Contains(l, "code=RUN_NOT_FOUND") {
		t.Errorf("a 404 was not logged at DEBUG:\n%s", l)
	}
	store.Down()
	_, err = c.Status(ctx, "run-nope")
	apiError(t, err, http.StatusBadGateway, codes.UpstreamUnavailable)
	if l := logs.String(); !strings.Contains(l, "level=ERROR msg=http_request_failed") || !strings.Contains(l, "code=UPSTREAM_UNAVAILABLE") {
		t.Errorf("a 502 was not logged at ERROR:\n%s", l)
	}
}

// TestNoTokensServesLoopbackOnly: without tokens a request from another
// host is refused, whatever actor it names.
func TestNoTokensServesLoopbackOnly(t *testing.T) {
	t.Parallel()
	runner, err := run.NewRunner(run.Config{Store: memstore.New()}, run.Agent{Slug: "quick", Steps: []run.Step{quickStep("load")}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Runner: runner, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for remote, want := range map[string]int{"192.0.2.7:4000": 401, "127.0.0.1:4000": 200, "[::1]:4000": 200} {
		req := httptest.NewRequest("GET", "/agents", nil)
		req.RemoteAddr = remote
		req.Host = "localhost:8080" // httptest's example.com is another host's name
		req.Header.Set("X-Conveyor-Actor", "admin")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("from %s: %d %s, want %d", remote, w.Code, w.Body, want)
		}
	}
}
