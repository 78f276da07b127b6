package page_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// idleRunner is a Runner the API needs, with one agent, never run.
func idleRunner(t *testing.T, store *storage.Store, log *slog.Logger) *run.Runner {
	t.Helper()
	r, err := run.NewRunner(run.Config{Store: store, Logger: log}, run.Agent{Slug: "idle", Steps: []run.Step{{Name: "nothing",
		Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// inboxWorker serves the API and the page over an inbox whose entries of
// action propose-edit start a BRIEF job (as a Client's InboxJobs does),
// with one entry in each state.
type inboxWorker struct {
	URL   string
	box   *inbox.Box
	clock *clock.Fake
	stop  func()
}

func inboxEntry(id, action, target string, ttl int) lifecycle.InboxSubmission {
	return lifecycle.InboxSubmission{ID: id, Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
		Intent:   lifecycle.InboxIntent{Action: action, Target: target},
		Metadata: lifecycle.InboxMetadata{TTLHours: ttl}}
}

func startInboxWorker(t *testing.T) *inboxWorker {
	t.Helper()
	ctx := context.Background()
	store := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := clock.NewFake(time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second))
	queue, err := jobqueue.New(jobqueue.Config{Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	box, err := inbox.New(inbox.Config{Store: store, Clock: clk, Logger: quiet,
		Dispatch: func(ctx context.Context, e lifecycle.InboxEntry) (string, error) {
			if e.Intent.Action != "propose-edit" {
				return "", nil
			}
			j, err := queue.InsertJob(ctx, jobqueue.NewJob{JobID: "inbox:" + e.ID, JobType: lifecycle.JobBrief,
				Payload: json.RawMessage(`{"inbox_entry_id":"` + e.ID + `"}`)})
			if errors.Is(err, lifecycle.ErrJobExists) {
				return "inbox:" + e.ID, nil
			}
			return j.JobID, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	gw := lifecycle.ActorGateway
	for _, s := range []lifecycle.InboxSubmission{
		inboxEntry("inbox_2026-11-28_expired01", "propose-summary", "notes/violin.pp.ua/partita-bwv1004", 1),
		inboxEntry("inbox_2026-11-28_pending01", "propose-edit", "notes/violin.pp.ua/sonata-bwv1001", 0),
		inboxEntry("inbox_2026-11-28_processed1", "propose-summary", "notes/violin.pp.ua/sonata-bwv1003", 0),
		inboxEntry("inbox_2026-11-28_rejected01", "propose-edit", "notes/cello.pp.ua/suite-bwv1007", 0),
	} {
		if _, err := box.Submit(ctx, gw, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := box.Process(ctx, gw, "inbox_2026-11-28_processed1", "prop_2026-11-28_sonata"); err != nil {
		t.Fatal(err)
	}
	if _, err := box.Reject(ctx, gw, "inbox_2026-11-28_rejected01", "the target is outside the zone of this guest"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	if moved, err := box.ExpireDue(ctx, lifecycle.ActorSystem); err != nil || len(moved) != 1 {
		t.Fatalf("ExpireDue = %v, %v", moved, err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: idleRunner(t, store, quiet), Inbox: box, Queue: queue, Store: store, Events: true, EventPollInterval: 50 * time.Millisecond, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := serveWorker(api)
	s.spawn(api.Run)
	return &inboxWorker{URL: s.URL, box: box, clock: clk, stop: func() { s.stop(t) }}
}

// entryRow is the selector of an entry's row, in a state.
func entryRow(id, status string) string {
	return `#inbox-body tr[data-entry="` + id + `"][data-status="` + status + `"]`
}

// The inbox view: each state's badge in its colour (pending yellow,
// processed green with its proposal's link, rejected red with its reason,
// expired grey with a clock), the pending entry's job link, expired entries
// shown only with "show expired", a quick add and a re-create each
// answered by a toast and a new pending row, and entries submitted and
// processed elsewhere followed live from the event stream. At 800 px and
// 1,400 px nothing runs out of the viewport.
func TestInboxPage(t *testing.T) {
	bin := chromium(t)
	w := startInboxWorker(t)
	defer w.stop()
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(3*time.Minute, closeBrowser)
	defer overall.Stop()

	do(t, ctx, "open the inbox", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/inbox"),
		chromedp.WaitVisible(css(entryRow("inbox_2026-11-28_pending01", "pending"))),
		chromedp.WaitVisible(css(entryRow("inbox_2026-11-28_processed1", "processed"))),
		chromedp.WaitVisible(css(entryRow("inbox_2026-11-28_rejected01", "rejected"))),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	if n := get(t, ctx, "count expired rows", chromedp.Evaluate[int](`document.querySelectorAll('#inbox-body tr[data-status="expired"]').length`)); n != 0 {
		t.Errorf("%d expired rows shown without show expired", n)
	}
	badgeBG := func(id string) string {
		return get(t, ctx, "read a badge", chromedp.Evaluate[string](`getComputedStyle(document.querySelector('#inbox-body tr[data-entry="`+id+`"] [data-testid="inbox-badge"]')).backgroundColor`))
	}
	for id, want := range map[string]string{
		"inbox_2026-11-28_pending01":  "rgb(255, 248, 197)", // yellow
		"inbox_2026-11-28_processed1": "rgb(239, 250, 241)", // green
		"inbox_2026-11-28_rejected01": "rgb(255, 240, 241)", // red
	} {
		if got := badgeBG(id); got != want {
			t.Errorf("badge of %s: background %s, want %s", id, got, want)
		}
	}
	if href := get(t, ctx, "read the proposal link", chromedp.Evaluate[string](`document.querySelector('`+entryRow("inbox_2026-11-28_processed1", "processed")+` [data-testid="inbox-proposal"]').getAttribute('href')`)); href != "#/proposals/prop_2026-11-28_sonata" {
		t.Errorf("proposal link %q", href)
	}
	if reason := get(t, ctx, "read the reason", chromedp.Text(css(entryRow("inbox_2026-11-28_rejected01", "rejected")+` [data-testid="inbox-reason"]`))); reason != "the target is outside the zone of this guest" {
		t.Errorf("reason shown %q", reason)
	}
	if job := get(t, ctx, "read the job link", chromedp.Evaluate[string](`document.querySelector('`+entryRow("inbox_2026-11-28_pending01", "pending")+` [data-testid="inbox-job"]').getAttribute('href')`)); job != "#/jobs/inbox%3Ainbox_2026-11-28_pending01" {
		t.Errorf("job link %q", job)
	}

	expired := entryRow("inbox_2026-11-28_expired01", "expired")
	do(t, ctx, "show expired entries", 20*time.Second,
		chromedp.Click(css(`#inbox-show-expired`)),
		chromedp.WaitVisible(css(expired+` [data-testid="inbox-badge"] svg.clock`)),
	)
	if got := badgeBG("inbox_2026-11-28_expired01"); got != "rgb(234, 238, 242)" {
		t.Errorf("expired badge background %s, want grey", got)
	}
	if !strings.Contains(get(t, ctx, "read the hash", chromedp.Evaluate[string](`location.hash`)), "expired=show") {
		t.Error("the filter is not in the hash")
	}

	// Re-create the expired entry: a new pending entry with its content.
	newRows := `[...document.querySelectorAll('#inbox-body tr[data-status="pending"]')].filter(r => r.textContent.includes('partita-bwv1004')).length`
	do(t, ctx, "re-create the expired entry", 20*time.Second,
		chromedp.Click(css(expired+` [data-testid="inbox-recreate"]`)),
		chromedp.WaitVisible(css(`[data-testid="toast"]`)),
		chromedp.Poll[chromedp.Void](newRows+` === 1`, chromedp.WithPollingInterval(50*time.Millisecond)),
	)
	if toast := get(t, ctx, "read the toast", chromedp.Text(css(`[data-testid="toast"]`))); !strings.HasPrefix(toast, "Accepted for processing: inbox_") {
		t.Errorf("toast %q", toast)
	}

	// The quick add.
	added := `[...document.querySelectorAll('#inbox-body tr[data-status="pending"]')].some(r => r.textContent.includes('notes/viola.pp.ua/quick'))`
	do(t, ctx, "quick add", 20*time.Second,
		chromedp.SetValue(css(`#inbox-target`), "notes/viola.pp.ua/quick"),
		chromedp.Click(css(`[data-testid="inbox-add"]`)),
		chromedp.Poll[chromedp.Void](added, chromedp.WithPollingInterval(50*time.Millisecond)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('[data-testid="toast"]').length >= 2`, chromedp.WithPollingInterval(50*time.Millisecond)),
	)

	// Live: an entry submitted and then processed by another client. The
	// box's clock is brought to now, as the event stream sends what its
	// audit log holds from now on.
	w.clock.Advance(time.Since(w.clock.Now()))
	if _, err := w.box.Submit(context.Background(), lifecycle.ActorGateway, inboxEntry("inbox_2026-11-28_live0001", "propose-edit", "notes/live", 0)); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "see the new entry live", 20*time.Second,
		chromedp.WaitVisible(css(entryRow("inbox_2026-11-28_live0001", "pending"))),
		chromedp.WaitVisible(css(`[data-testid="toast"][data-entry="inbox_2026-11-28_live0001"]`)),
	)
	if _, err := w.box.Process(context.Background(), lifecycle.ActorGateway, "inbox_2026-11-28_live0001", "prop_live"); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "see it processed live", 20*time.Second,
		chromedp.WaitVisible(css(entryRow("inbox_2026-11-28_live0001", "processed")+` [data-testid="inbox-proposal"]`)))

	// Hiding the expired entries again.
	do(t, ctx, "hide expired entries", 20*time.Second,
		chromedp.Click(css(`#inbox-show-expired`)),
		chromedp.WaitNotPresent(css(expired)),
	)

	// The job links back to its entry.
	do(t, ctx, "open the entry's job", 20*time.Second,
		chromedp.Click(css(entryRow("inbox_2026-11-28_pending01", "pending")+` [data-testid="inbox-job"]`)),
		chromedp.WaitVisible(css(`[data-testid="job-inbox-entry"]`)),
	)
	if back := get(t, ctx, "read the job's entry", chromedp.Text(css(`[data-testid="job-inbox-entry"]`))); back != "inbox_2026-11-28_pending01" {
		t.Errorf("the job names entry %q", back)
	}

	for _, width := range []int64{800, 1400} {
		do(t, ctx, "lay out the inbox", 20*time.Second,
			chromedp.EmulateViewport(width, 900),
			chromedp.Navigate(w.URL+"/ui/#/inbox?expired=show"),
			chromedp.Reload(),
			chromedp.WaitVisible(css(expired)),
		)
		for _, p := range get(t, ctx, "measure the page", chromedp.Evaluate[[]string](pageOverflow)) {
			t.Errorf("at %d px: %s", width, p)
		}
	}
}

// Without the event stream the inbox reads its counts every 30 s and
// reads the entries again when they changed; here the first read, and a
// view whose stream is down says it polls.
func TestInboxPageWithoutTheStream(t *testing.T) {
	bin := chromium(t)
	store := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	box, err := inbox.New(inbox.Config{Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := box.Submit(context.Background(), lifecycle.ActorGateway, inboxEntry("inbox_2026-11-28_poll0001", "propose-edit", "notes/poll", 0)); err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: idleRunner(t, store, quiet), Inbox: box, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer func() { srv.CloseClientConnections(); srv.Close() }()
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	do(t, ctx, "open the inbox", 20*time.Second,
		chromedp.Navigate(srv.URL+"/ui/#/inbox"),
		chromedp.WaitVisible(css(entryRow("inbox_2026-11-28_poll0001", "pending"))),
		chromedp.WaitVisible(css(`#live[data-mode="polling"]`)),
		chromedp.WaitVisible(css(`#inbox-stats [data-count="pending"]`)),
	)
	if txt := get(t, ctx, "read the counts", chromedp.Text(css(`#inbox-stats`))); !strings.Contains(txt, "1 pending") {
		t.Errorf("counts %q", txt)
	}
}
