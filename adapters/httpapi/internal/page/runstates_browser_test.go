package page_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

const queueAgent = "one-at-a-time"

// queueWorker serves an agent that runs one run at a time: its second
// step takes a permit, so the test lets each run through in turn, and the
// runs submitted meanwhile queue. Its runner starts only when the test
// calls start, so a run submitted before stays requested.
type queueWorker struct {
	URL     string
	permits chan struct{}
	gate    *gate
	start   func()
	stop    func()
}

func startQueueWorker(t *testing.T) *queueWorker {
	t.Helper()
	store := memstore.New()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w := &queueWorker{permits: make(chan struct{}, 8)}
	agent := run.Agent{Slug: queueAgent, Concurrency: 1, Steps: []run.Step{
		{Name: "fetch", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Summary: "fetched"}, nil
		}},
		{Name: "review", Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
			select {
			case <-w.permits:
				return run.StepOutput{Summary: "reviewed"}, nil
			case <-ctx.Done():
				return run.StepOutput{}, ctx.Err()
			}
		}},
		{Name: "publish", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Summary: "published"}, nil
		}},
	}}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: log, StepTimeout: time.Minute, StepRetries: -1,
		PollInterval: 100 * time.Millisecond, ShutdownGrace: time.Second}, agent)
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: runner, Page: true, Logger: log, Store: store, Events: true, EventPollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.gate = newGate(api)
	s := serveWorker(w.gate)
	s.spawn(api.Run)
	w.start = func() { s.spawn(runner.Run) }
	w.URL = s.URL
	w.stop = func() { s.stop(t) }
	return w
}

func (w *queueWorker) submit(t *testing.T) string {
	t.Helper()
	return submitRun(t, w.URL, `{"agent_slug":"`+queueAgent+`","source":"ui"}`)
}

// The run page's states (docs/spec.md#the-run-page): a spinner while the
// run is requested; a queued run's place in its agent's queue; a running
// run's progress bar and every declared step, the one executing
// highlighted and the pending ones listed; a notification when a watched
// run ends (the Notification API when granted, else a notice on the page).
func TestRunPageStates(t *testing.T) {
	bin := chromium(t)
	w := startQueueWorker(t)
	defer w.stop()
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(3*time.Minute, closeBrowser)
	defer overall.Stop()

	// No runner yet: the run stays requested, and the page spins.
	first := w.submit(t)
	do(t, ctx, "see a requested run's spinner", 20*time.Second,
		chromedp.EmulateViewport(1200, 900),
		chromedp.Navigate(w.URL+"/ui/#/runs/"+first),
		chromedp.WaitVisible(css(`#run-status[data-status="requested"]`)),
		chromedp.WaitVisible(css(`#run-spinner[role="status"]`)),
	)
	w.start()
	do(t, ctx, "see the spinner go once the run runs", 20*time.Second,
		chromedp.WaitVisible(css(`#run-status[data-status="running"]`)),
		chromedp.WaitNotPresent(css(`#run-spinner`)),
	)
	// Run ids start with their submit's second, and the queue is in id
	// order: a second apart, the order is the submits'.
	time.Sleep(1100 * time.Millisecond)
	second := w.submit(t)
	time.Sleep(1100 * time.Millisecond)
	third := w.submit(t)
	// The first run holds the one slot: the others queue, oldest first.
	do(t, ctx, "see the third run's place in the queue", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/runs/"+third),
		chromedp.WaitVisible(css(`#run-status[data-status="queued"]`)),
		chromedp.WaitVisible(css(`#run-queue-position`)),
		chromedp.WaitVisible(css(`#steps-body tr[data-step="publish"][data-status="pending"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	if pos := get(t, ctx, "read the queue position", chromedp.Text(css(`#run-queue-position`))); pos != "position 2 (1 queued ahead)" {
		t.Errorf("third run's queue position %q, want position 2 (1 queued ahead)", pos)
	}
	screenshot(t, ctx, "run-queued.png")
	do(t, ctx, "see the second run next", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/runs/"+second),
		chromedp.WaitVisible(css(`#run-status[data-status="queued"]`)),
		chromedp.WaitVisible(css(`#run-queue-position`)),
	)
	if pos := get(t, ctx, "read the queue position", chromedp.Text(css(`#run-queue-position`))); pos != "next to start" {
		t.Errorf("second run's queue position %q, want next to start", pos)
	}

	// The running run: its progress, and every step, the executing one
	// highlighted in its place.
	do(t, ctx, "see the running run's progress", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/runs/"+first),
		chromedp.WaitVisible(css(`#run-status[data-status="running"]`)),
		chromedp.WaitVisible(css(`#steps-body tr.current[data-step="review"][data-status="running"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	rows := get(t, ctx, "read the steps", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#steps-body tr")].map(r => r.dataset.step + "=" + r.dataset.status + (r.classList.contains("current") ? "*" : ""))`))
	if want := "[fetch=completed review=running* publish=pending]"; fmtList(rows) != want {
		t.Errorf("steps shown %v, want %s", rows, want)
	}
	bar := get(t, ctx, "read the progress bar", chromedp.Evaluate[[]float64](`[document.querySelector("#run-progress-bar").value, document.querySelector("#run-progress-bar").max]`))
	if len(bar) != 2 || bar[0] != 1 || bar[1] != 3 {
		t.Errorf("progress bar value/max %v, want [1 3]", bar)
	}
	if fin := get(t, ctx, "read fetch's finished time", chromedp.Text(css(`#steps-body tr[data-step="fetch"] td:nth-child(5)`))); fin == "" || fin == "—" {
		t.Errorf("fetch's finished time %q, want a time", fin)
	}
	if cur := get(t, ctx, "read the current step", chromedp.Text(css(`#run-current-step`))); cur != "review" {
		t.Errorf("current step %q, want review", cur)
	}
	// Tall enough to show the steps below the machine.
	do(t, ctx, "size the window for the whole page", 10*time.Second, chromedp.EmulateViewport(1200, 1250))
	screenshot(t, ctx, "run-running.png")
	do(t, ctx, "size the window back", 10*time.Second, chromedp.EmulateViewport(1200, 900))

	// Notification granted: the end is a system notification (recorded
	// by a stand-in for the browser's Notification).
	do(t, ctx, "grant notifications", 10*time.Second, chromedp.Evaluate[chromedp.Void](
		`window.__notified = []; window.__realNotification = window.Notification; window.Notification = class { constructor(title, o) { window.__notified.push(o.body); } static get permission() { return "granted"; } };`))
	w.permits <- struct{}{}
	do(t, ctx, "see the first run end notified", 20*time.Second,
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
		chromedp.Poll[chromedp.Void](`window.__notified.length > 0`, chromedp.WithPollingInterval(50*time.Millisecond)),
	)
	if got := get(t, ctx, "read the notification", chromedp.Evaluate[[]string](`window.__notified`)); len(got) != 1 || got[0] != "Run "+first+" completed." {
		t.Errorf("notifications %v, want one for %s", got, first)
	}
	if hidden := get(t, ctx, "read the notice", chromedp.Evaluate[bool](`document.querySelector("#run-done-notice").hidden`)); !hidden {
		t.Error("the in-page notice shows beside a granted notification")
	}
	// Not granted (headless Chromium's default): a notice on the page.
	do(t, ctx, "follow the second run", 20*time.Second,
		chromedp.Evaluate[chromedp.Void](`window.Notification = window.__realNotification`),
		chromedp.Navigate(w.URL+"/ui/#/runs/"+second),
		chromedp.WaitVisible(css(`#steps-body tr.current[data-step="review"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	if perm := get(t, ctx, "read the permission", chromedp.Evaluate[string](`String(window.Notification && Notification.permission)`)); perm == "granted" {
		t.Fatalf("notifications granted in the fresh page (%s): the in-page path is not tested", perm)
	}
	w.permits <- struct{}{}
	do(t, ctx, "see the second run's end on the page", 20*time.Second,
		chromedp.WaitVisible(css(`#run-done-notice[data-status="completed"]`)),
	)
	if notice := get(t, ctx, "read the notice", chromedp.Text(css(`#run-done-notice`))); notice != "Run "+second+" completed." {
		t.Errorf("notice %q", notice)
	}
	w.permits <- struct{}{}
}

func fmtList(xs []string) string { return "[" + strings.Join(xs, " ") + "]" }

// The run page reads nothing while its tab is hidden (docs/spec.md#polling)
// and reads the run again once shown.
func TestRunPagePausesWhileHidden(t *testing.T) {
	bin := chromium(t)
	w := startWorker(t, false) // no stream: the page polls every 5 s
	defer w.stop()
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(2*time.Minute, closeBrowser)
	defer overall.Stop()

	runID := w.submit(t)
	path := "/runs/" + runID + "/status"
	setHidden := func(hidden bool) chromedp.Action[chromedp.Void] {
		v := "false"
		if hidden {
			v = "true"
		}
		return chromedp.Evaluate[chromedp.Void](`Object.defineProperty(document, "hidden", { configurable: true, get: () => ` + v + ` });
			document.dispatchEvent(new Event("visibilitychange"))`)
	}
	do(t, ctx, "open the run's page, polling", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/runs/"+runID),
		chromedp.WaitVisible(css(`#run-status[data-status="running"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="polling"]`)),
		setHidden(true),
		chromedp.WaitVisible(css(`#live[data-mode="paused"]`)),
	)
	before := w.gate.readsOf(path)
	time.Sleep(6 * time.Second) // more than a poll interval
	if after := w.gate.readsOf(path); after != before {
		t.Errorf("%d reads of the status while the tab was hidden", after-before)
	}
	do(t, ctx, "show the tab again", 20*time.Second,
		setHidden(false),
		chromedp.Poll[chromedp.Void](`document.querySelector("#live").dataset.mode !== "paused"`, chromedp.WithPollingInterval(50*time.Millisecond)),
	)
	deadline := time.Now().Add(10 * time.Second)
	for w.gate.readsOf(path) == before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if w.gate.readsOf(path) == before {
		t.Error("no read of the status once the tab was shown again")
	}
}
