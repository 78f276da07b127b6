package httpapi_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor"
	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// The root package's Client is what Mount mounts on.
var _ httpapi.Parts = (*conveyor.Client)(nil)

func mountClient(t *testing.T) *conveyor.Client {
	t.Helper()
	c, err := conveyor.New(conveyor.Config{Store: memstore.New(), StoreCheck: conveyor.StoreCheckOff,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Agents: []run.Agent{{Slug: "quick", Steps: []run.Step{quickStep("load")}}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMount: a Client with the API mounted serves the routes, the page and
// the event stream on the listener, with the Server's config applied, and
// its Stop ends the server with an event stream still open.
func TestMount(t *testing.T) {
	c := mountClient(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "m 1\n") })
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if err := httpapi.Mount(c, ln, httpapi.Config{Metrics: metrics, Logger: log, Events: true, Page: true,
		EventPollInterval: 50 * time.Millisecond, Drain: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop(ctx)
		}
	}()
	base := "http://" + ln.Addr().String()
	for path, want := range map[string]int{"/healthz": 200, "/ui/": 200, "/metrics": 200, "/webhooks/github": 404, "/runs/run_nope/status": 404} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	cl := &client.Client{BaseURL: base}
	res, err := cl.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := cl.Wait(ctx, res.RunID); err != nil || st.Status != "completed" {
		t.Fatalf("run: %+v, %v", st, err)
	}
	// An event stream open across Stop: the feed stops first and ends it.
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, base+"/events/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("event stream: %d %q", resp.StatusCode, ct)
	}
	start := time.Now()
	stopped = true
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("Stop took %s with a stream open, want well within the drain", took)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the server still answers after Stop")
	}
	if n := logs.Count("no_tokens"); n != 1 {
		t.Errorf("%d no_tokens warnings from a server without tokens, want 1:\n%s", n, logs.String())
	}
}

// TestMountRefusals: Mount refuses what it cannot serve, and a Client
// already started.
func TestMountRefusals(t *testing.T) {
	route := []httpapi.WebhookRoute{{Source: "github", Event: "pull_request.opened", Agent: "quick"}}
	tests := []struct {
		name    string
		cfg     httpapi.Config
		started bool
		want    error
	}{
		{"routes without a secret", httpapi.Config{WebhookRoutes: route}, false, httpapi.ErrInvalidConfig},
		{"a route to no agent", httpapi.Config{GitHubSecret: "s",
			WebhookRoutes: []httpapi.WebhookRoute{{Source: "github", Event: "pull_request.opened", Agent: "nobody"}}}, false, httpapi.ErrInvalidConfig},
		{"a token of no actor", httpapi.Config{Tokens: map[string]lifecycle.Actor{"t": "nobody"}}, false, httpapi.ErrInvalidConfig},
		{"a started Client", httpapi.Config{}, true, conveyor.ErrStarted},
		{"a secret and its routes", httpapi.Config{GitHubSecret: "s", WebhookRoutes: route}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mountClient(t)
			if tt.started {
				if err := c.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = c.Stop(context.Background()) }()
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			err = httpapi.Mount(c, ln, tt.cfg)
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("Mount = %v, want %v", err, tt.want)
			}
		})
	}
}
