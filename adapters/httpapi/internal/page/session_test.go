package page_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// quiet discards the logs of the parts a page test runs.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openPage serves api and starts a browser (bin) for it: the server's URL
// and the browser's context. Both close when the test ends, the browser
// two minutes after the start at the latest, so that a wait which never
// ends fails the test rather than hangs it.
func openPage(t *testing.T, bin string, api http.Handler) (string, context.Context) {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	bctx, closeBrowser := browser(t, bin)
	overall := time.AfterFunc(2*time.Minute, closeBrowser)
	t.Cleanup(func() { overall.Stop(); closeBrowser() })
	return srv.URL, bctx
}

// runWhileTesting runs each of runs (a Runner's Run, the API's) until
// the test ends, and waits for them then. Call it before openPage: the
// browser and the server close first.
func runWhileTesting(t *testing.T, runs ...func(context.Context) error) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, len(runs))
	for _, r := range runs {
		go func() { done <- r(ctx) }()
	}
	t.Cleanup(func() {
		stop()
		for range runs {
			<-done
		}
	})
}

// waitStatus waits, ten seconds at most, until run id rests in want.
func waitStatus(t *testing.T, r *run.Runner, id, want string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := r.Wait(wctx, id); err != nil || st.Status != want {
		t.Fatalf("run %s: %s %v", id, st.Status, err)
	}
}

// queueAPI is the API and page of the job queue q on store, beside a
// Runner whose one agent does nothing (the page's run views need one).
func queueAPI(t *testing.T, store *storage.Store, q *jobqueue.Queue) *httpapi.Server {
	t.Helper()
	noop := []run.Step{{Name: "noop", Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet}, run.Agent{Slug: "plain", Steps: noop})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: runner, Queue: q, Store: store, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// served is a Worker's API served on 127.0.0.1 (httptest listens on
// loopback only: a Worker without tokens serves loopback only, and the
// test touches no other network), with the parts it runs beside it.
type served struct {
	URL    string
	srv    *httptest.Server
	ctx    context.Context
	cancel context.CancelFunc
	done   chan error
	n      int
}

func serveWorker(h http.Handler) *served {
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(h)
	return &served{URL: srv.URL, srv: srv, ctx: ctx, cancel: cancel, done: make(chan error, 4)}
}

// spawn runs f (a Runner's Run, the API's) until stop; from the test's
// goroutine only.
func (s *served) spawn(f func(context.Context) error) {
	s.n++
	go func() { s.done <- f(s.ctx) }()
}

// closeServer cuts the open event streams, which end only with their
// clients, then closes the server, which waits for every request.
func (s *served) closeServer() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// stopRuns ends what spawn started and reports any error but the cancel.
func (s *served) stopRuns(t *testing.T) {
	s.cancel()
	for range s.n {
		if err := <-s.done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("worker: %v", err)
		}
	}
}

// stop is closeServer, then stopRuns.
func (s *served) stop(t *testing.T) {
	s.closeServer()
	s.stopRuns(t)
}

// submitRun starts a run through the API at url, as a client would, with
// body the POST /agents/run request.
func submitRun(t *testing.T, url, body string) string {
	t.Helper()
	res, err := http.Post(url+"/agents/run", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		RunID string `json:"run_id"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("submit: status %d, %v", res.StatusCode, err)
	}
	return out.RunID
}

// screenshot writes the page as name into the folder CONVEYOR_SCREENSHOTS
// names, when it is set; a screenshot over 300 KB fails the test (they are
// kept in docs/).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("CONVEYOR_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := get(t, ctx, "screenshot "+name, chromedp.CaptureScreenshot())
	if len(png) > 300<<10 {
		t.Errorf("%s is %d bytes, over 300 KB", name, len(png))
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d bytes", name, len(png))
}
