package page_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// chromedp ends its goroutines when its contexts are canceled and waits for
// the browser process, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// chromium returns the browser to drive, or skips the test when there is
// none and CONVEYOR_REQUIRE_CHROMIUM is unset (CI sets it, so there the
// test fails instead of passing unseen).
func chromium(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("CHROMIUM_BIN")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CONVEYOR_REQUIRE_CHROMIUM") != "" {
			t.Fatalf("CONVEYOR_REQUIRE_CHROMIUM is set but Chromium is not at %s (%v): run scripts/install-tools.sh", bin, err)
		}
		t.Skipf("skipped: no Chromium at %s (set CHROMIUM_BIN, or run scripts/install-tools.sh; CONVEYOR_REQUIRE_CHROMIUM=1 makes this a failure)", bin)
	}
	return bin
}

// worker is a Worker's HTTP surface in this process: a real Runner on a
// memstore, the events feed tailing the same store, the API and the page.
type worker struct {
	URL     string
	release chan struct{} // closing it lets the demo agent's first step end
	gate    *gate         // in front of the API: holds an answer back when asked
	srv     *httptest.Server
	stop    func()
}

const demoAgent = "page-demo"

// startWorker starts the Worker; withFeed false leaves GET /events/stream
// unserved (503), as a Worker without the feed answers.
func startWorker(t *testing.T, withFeed bool) *worker {
	t.Helper()
	store := memstore.New()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w := &worker{release: make(chan struct{})}
	// The approval machine: it has completed (the state the page must reach)
	// and a cancel that only gateway and orchestration may make, so the
	// frontend actor's cancel is the machine's 403.
	agent := run.Agent{
		Slug:    demoAgent,
		Machine: lifecycle.MachineApproval,
		Steps: []run.Step{
			// Idempotent: no start marker, so while it runs the Worker
			// has no step record and the page makes the in-progress row.
			{Name: "wait-for-test", Idempotent: true, Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
				select {
				case <-w.release:
					return run.StepOutput{Summary: "released by the test"}, nil
				case <-ctx.Done():
					return run.StepOutput{}, ctx.Err()
				}
			}},
			{Name: "summarize", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Summary: "two steps done", Data: json.RawMessage(`{"words":2}`)}, nil
			}},
		},
	}
	runner, err := run.NewRunner(run.Config{
		Store: store, Logger: log, StepTimeout: time.Minute, StepRetries: -1,
		PollInterval: 100 * time.Millisecond, ShutdownGrace: time.Second,
	}, agent)
	if err != nil {
		t.Fatal(err)
	}
	queue, err := jobqueue.New(jobqueue.Config{Store: store, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := schedule.New(schedule.Config{Runner: runner, Queue: queue, Store: store, Logger: log,
		Schedules: []schedule.Schedule{{ID: "nightly-" + demoAgent, Agent: demoAgent, Cron: "@daily"},
			{ID: "hourly-brief", Every: time.Hour, Job: &lifecycle.ScheduleJob{JobType: lifecycle.JobBrief, AgentSlug: "briefs"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := httpapi.Config{Runner: runner, Schedules: sched.View(), Page: true, Logger: log}
	if withFeed {
		cfg.Store, cfg.Events, cfg.EventPollInterval = store, true, 50*time.Millisecond
	}
	api, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.gate = newGate(api)
	s := serveWorker(w.gate)
	s.spawn(runner.Run)
	if withFeed {
		s.spawn(api.Run)
	}
	w.srv, w.URL = s.srv, s.URL
	w.stop = func() {
		s.closeServer()
		select {
		case <-w.release:
		default:
			close(w.release)
		}
		s.stopRuns(t)
	}
	return w
}

// status reads a run's status through the API, as another client would.
func (w *worker) status(t *testing.T, runID string) lifecycle.RunStatus {
	t.Helper()
	res, err := http.Get(w.URL + "/runs/" + runID + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var st lifecycle.RunStatus
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// browser starts headless Chromium with the flags this machine's closed
// network needs (no background networking, no component updates, no QUIC)
// and a fresh profile, and returns its tab's context. The browser lives as
// long as that context (chromedp binds it to the context of the first Run),
// so it is started here without a deadline; the watchdog closes it if the
// start hangs, and the caller bounds each later action.
func browser(t *testing.T, bin string) (context.Context, func()) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	closeAll := func() { cancel(); acancel() }
	watchdog := time.AfterFunc(30*time.Second, closeAll)
	err := chromedp.Do(ctx)
	if !watchdog.Stop() {
		err = fmt.Errorf("no browser within 30 s: %w", err)
	}
	if err != nil {
		closeAll()
		t.Fatalf("starting %s: %v", bin, err)
	}
	return ctx, closeAll
}

// do runs actions under their own deadline, so a wait that never ends fails
// the test and says what it was waiting for.
func do(t *testing.T, ctx context.Context, what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action that returns a value, under a deadline.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// css makes a selector a CSS query (a plain string would be a DOM search).
type css = chromedp.CSS

func TestRunPageFollowsARunLive(t *testing.T) {
	bin := chromium(t)
	w := startWorker(t, true)
	defer w.stop()
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	// The whole session is bounded too: a hang fails, never passes.
	overall := time.AfterFunc(3*time.Minute, closeBrowser)
	defer overall.Stop()

	// Script errors fail the test; other console lines are logged (a
	// refused request, such as the 403 below, is one).
	cctx, stopConsole := context.WithCancel(ctx)
	consoleDone := make(chan []string)
	messages := chromedp.Console(cctx)
	go func() {
		var exceptions []string
		for m, err := range messages {
			if err != nil {
				break
			}
			if m.Type == chromedp.ConsoleException {
				exceptions = append(exceptions, m.Text)
			}
			t.Logf("console %s: %s", m.Type, m.Text)
		}
		consoleDone <- exceptions
	}()
	defer func() {
		stopConsole()
		for _, e := range <-consoleDone {
			t.Errorf("page script error: %s", e)
		}
	}()

	// The page starts the run: GET / redirects to /ui/, the agents list
	// names the demo agent, its button submits and opens the run's page.
	startButton := css(`button[data-testid="start-run"][data-agent="` + demoAgent + `"]`)
	do(t, ctx, "open the agents page", 20*time.Second,
		chromedp.Navigate(w.URL+"/"),
		chromedp.WaitVisible(startButton),
		// The schedules are listed with their pause button.
		chromedp.WaitVisible(css(`#schedules tr[data-schedule="nightly-`+demoAgent+`"] button`)),
	)
	// A periodic job's row names its job, and its interval as configured.
	if row := get(t, ctx, "read the periodic job's row", chromedp.Text(css(`#schedules tr[data-schedule="hourly-brief"]`))); !strings.Contains(row, "job BRIEF in briefs") || !strings.Contains(row, "every 1h0m0s") {
		t.Fatalf("the periodic job's row: %q", row)
	}
	do(t, ctx, "start a run from the page", 20*time.Second,
		// A marker set now survives only if the page is never reloaded.
		chromedp.Evaluate[chromedp.Void](`window.__noReload = "kept"`),
		chromedp.Click(startButton),
		chromedp.WaitVisible(css(`#run-status`)),
	)
	runID := get(t, ctx, "read the run id", chromedp.Text(css(`#run-id`)))
	if !strings.HasPrefix(runID, "run_") {
		t.Fatalf("run id on the page = %q", runID)
	}
	t.Logf("run %s", runID)
	if st := w.status(t, runID); st.TriggerSource == nil || st.TriggerSource.Source != "ui" {
		t.Errorf("a run started from the page has trigger_source %+v, want source ui", st.TriggerSource)
	}

	do(t, ctx, "see the run running, live", 20*time.Second,
		chromedp.WaitVisible(css(`#run-status[data-status="running"]`)),
		chromedp.WaitReady(css(`#machine [data-state="running"].current`)),
		chromedp.WaitReady(css(`#machine [data-state="pending"].path`)),
		chromedp.WaitReady(css(`#machine .transition.path[data-from="pending"][data-to="running"]`)),
		// The events feed is up, so the page follows the stream, not polls.
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
		// Step 1 is in progress: its row, with its elapsed time ticking.
		chromedp.WaitVisible(css(`#steps-body tr.in-progress[data-step="wait-for-test"][data-status="running"] #step-elapsed`)),
		chromedp.Poll[chromedp.Void](`/^\d/.test(document.querySelector('#step-elapsed').textContent)`, chromedp.WithPollingInterval(50*time.Millisecond)),
	)
	if cur := get(t, ctx, "read the current step", chromedp.Text(css(`#run-current-step`))); cur != "wait-for-test" {
		t.Errorf("current step during step 1 = %q, want wait-for-test", cur)
	}
	for _, o := range labelOverlaps(t, ctx) {
		t.Errorf("overlap on the run page: %s", o)
	}

	// As frontend, which no cancel move lists: the Worker answers 403
	// FORBIDDEN and the page must say so.
	do(t, ctx, "cancel as a forbidden actor", 20*time.Second,
		chromedp.SetValue(css(`#actor`), "frontend"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#actor").dispatchEvent(new Event("change"))`),
		chromedp.WaitVisible(css(`#run-status[data-status="running"]`)),
		chromedp.WaitEnabled(css(`#btn-cancel`)),
		chromedp.Click(css(`#btn-cancel`)),
		chromedp.WaitVisible(css(`#action-error[data-status="403"]`)),
	)
	refusal := get(t, ctx, "read the refusal", chromedp.Text(css(`#action-error`)))
	if !strings.Contains(refusal, "403") || !strings.Contains(refusal, "FORBIDDEN") {
		t.Errorf("refusal shown = %q, want the 403 FORBIDDEN", refusal)
	}
	t.Logf("refusal shown: %s", refusal)
	if st := w.status(t, runID); st.Status != "running" || st.CancelRequested {
		t.Fatalf("after the refused cancel: status %q, cancel requested %v", st.Status, st.CancelRequested)
	}

	// The step ends; the page must reach completed by itself.
	close(w.release)
	do(t, ctx, "see the run completed without a reload", 30*time.Second,
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
		chromedp.WaitReady(css(`#machine [data-state="completed"].current`)),
		chromedp.WaitReady(css(`#machine .transition.path[data-from="running"][data-to="completed"]`)),
		chromedp.WaitReady(css(`#steps-body tr[data-step="summarize"][data-status="completed"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="stopped"]`)),
	)
	if marker := get(t, ctx, "read the marker", chromedp.Evaluate[string](`String(window.__noReload)`)); marker != "kept" {
		t.Errorf("the page was reloaded (marker %q)", marker)
	}
	steps := get(t, ctx, "read the steps", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#steps-body tr")].map(r => r.dataset.step + "=" + r.dataset.status)`))
	if want := []string{"wait-for-test=completed", "summarize=completed"}; fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Errorf("steps shown = %v, want %v", steps, want)
	}
	// The run's input (none from the page's button) and each step's output.
	if in := get(t, ctx, "read the input", chromedp.Text(css(`#run-input`))); in != "No input." {
		t.Errorf("input shown = %q, want No input.", in)
	}
	if out := get(t, ctx, "read the step output", chromedp.Evaluate[string](
		`document.querySelector('#steps-body tr[data-step="summarize"] details[data-testid="step-output"] pre').textContent`)); !strings.Contains(out, `"words": 2`) {
		t.Errorf("summarize's output shown = %q, want its data", out)
	}
	if n := get(t, ctx, "count in-progress rows", chromedp.Evaluate[int](`document.querySelectorAll("#steps-body tr.in-progress").length`)); n != 0 {
		t.Errorf("%d in-progress rows after the run ended", n)
	}
	current := get(t, ctx, "read the diagram", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#machine .state.current")].map(g => g.dataset.state)`))
	if fmt.Sprint(current) != "[completed]" {
		t.Errorf("current states in the diagram = %v, want [completed]", current)
	}

	// The agents page lists the run, and its status filter reads the
	// server's filtered page (GET /runs?status=).
	filter := css(`select[data-testid="status-filter"][data-agent="` + demoAgent + `"]`)
	row := css(`section[data-agent="` + demoAgent + `"] tr[data-run="` + runID + `"]`)
	pick := func(status string) chromedp.Action[chromedp.Void] {
		return chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('select[data-testid="status-filter"][data-agent="` +
			demoAgent + `"]'); s.value = "` + status + `"; s.dispatchEvent(new Event("change")); })()`)
	}
	do(t, ctx, "filter the agent's runs by status", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/"),
		chromedp.WaitVisible(row),
		chromedp.WaitReady(filter),
		pick("failed"),
		chromedp.WaitNotPresent(row),
		pick("completed"),
		chromedp.WaitVisible(row),
	)
	if older := get(t, ctx, "read the pager", chromedp.Evaluate[bool](
		`document.querySelector('button[data-testid="older-runs"][data-agent="`+demoAgent+`"]').hidden`)); !older {
		t.Errorf("an Older button is shown for a single page of runs")
	}

	png := get(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	shot := filepath.Join(t.TempDir(), "run-page.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	// The temp dir goes with the test; CONVEYOR_PAGE_SCREENSHOT keeps a copy.
	if keep := os.Getenv("CONVEYOR_PAGE_SCREENSHOT"); keep != "" {
		if err := os.WriteFile(keep, png, 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("screenshot kept at %s", keep)
	}
}

// Without the events feed the page polls the run's status every 5 s
// (docs/spec.md#polling) and still follows the run to its end, then stops polling.
func TestRunPageFallsBackToPolling(t *testing.T) {
	bin := chromium(t)
	w := startWorker(t, false)
	defer w.stop()
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(2*time.Minute, closeBrowser)
	defer overall.Stop()

	runID := w.submit(t)
	do(t, ctx, "open the run's page", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/runs/"+runID),
		chromedp.WaitVisible(css(`#run-status[data-status="running"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="polling"]`)),
		chromedp.Evaluate[chromedp.Void](`window.__noReload = "kept"`),
	)
	close(w.release)
	// One poll interval and a little more.
	do(t, ctx, "see the run completed by polling", 15*time.Second,
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
		chromedp.WaitReady(css(`#machine [data-state="completed"].current`)),
		chromedp.WaitVisible(css(`#live[data-mode="stopped"]`)),
	)
	if marker := get(t, ctx, "read the marker", chromedp.Evaluate[string](`String(window.__noReload)`)); marker != "kept" {
		t.Errorf("the page was reloaded (marker %q)", marker)
	}
}

// submit starts a run of the demo agent through the API.
func (w *worker) submit(t *testing.T) string {
	t.Helper()
	return submitRun(t, w.URL, `{"agent_slug":"`+demoAgent+`"}`)
}

// An agent's run list draws the answer to its latest read only: a read
// made while the run was running that answers after the read made once it
// completed is dropped. Before, it was drawn, and the list showed the
// completed run as running until the next event.
func TestAgentsPageDrawsTheLatestReadOfRuns(t *testing.T) {
	bin := chromium(t)
	w := startWorker(t, true)
	defer w.stop()
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(2*time.Minute, closeBrowser)
	defer overall.Stop()

	runID := w.submit(t)
	runs := `section[data-agent="` + demoAgent + `"] table`
	status := func(s string) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(css(runs + ` tr[data-run="` + runID + `"] .badge[data-status="` + s + `"]`))
	}
	// settled waits until every read of the runs the page asked for has
	// answered and been drawn or dropped: the table is aria-busy until then.
	settled := chromedp.Poll[chromedp.Void](`!document.querySelector('`+runs+`').hasAttribute('aria-busy')`, chromedp.WithPollingInterval(20*time.Millisecond))
	do(t, ctx, "open the agents page", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/"),
		status("running"),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
		settled,
	)

	// A read while the run runs is held back; the run then completes, and
	// its event makes the page read again.
	held, release := w.gate.hold(func(r *http.Request) bool {
		q := r.URL.Query()
		return r.Method == http.MethodGet && r.URL.Path == "/runs" && q.Get("agent") == demoAgent && !q.Has("status")
	})
	defer release()
	do(t, ctx, "read the runs again", 20*time.Second,
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('select[data-testid="status-filter"][data-agent="`+demoAgent+`"]'); s.value = ''; s.dispatchEvent(new Event('change')); })()`))
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the page did not read the runs again")
	}
	close(w.release)
	do(t, ctx, "see the run completed", 30*time.Second, status("completed"))
	release()
	do(t, ctx, "let the held read answer", 20*time.Second, settled)
	shown := get(t, ctx, "read the run's status", chromedp.Evaluate[string](
		`document.querySelector('`+runs+` tr[data-run="`+runID+`"] .badge').dataset.status`))
	if shown != "completed" {
		t.Fatalf("after the older read answered the run shows %q, want completed", shown)
	}
}
