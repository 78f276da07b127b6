package page_test

import (
	"context"
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
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// A run whose runner stopped heartbeating: once its lease lapses the run
// page, following the event stream (which says nothing of a lapse), shows
// "runner lost" with the lapse time unasked, and so does the agent's run
// list; once another runner took it over, "taken over at".
func TestRunPageShowsALostRunner(t *testing.T) {
	bin := chromium(t)
	const (
		slug  = "orphan-demo"
		lease = 5 * time.Minute
	)
	store := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The runners' clock moves only when the test moves it. It starts a
	// lease before the wall clock, so that the lapse is due within seconds
	// by the browser's clock too.
	fake := clock.NewFake(time.Now().Add(-lease + 2*time.Second).UTC().Truncate(time.Second))
	inA := make(chan struct{}, 1)
	newRunner := func(owner string) *run.Runner {
		work := func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
			if owner != "a" {
				return run.StepOutput{Summary: "resumed by " + owner}, nil
			}
			inA <- struct{}{}
			<-ctx.Done() // runner a's step ends only with its runner
			return run.StepOutput{}, ctx.Err()
		}
		r, err := run.NewRunner(run.Config{Store: store, Owner: owner, Clock: fake, Logger: quiet,
			LeaseDuration: lease, ShutdownGrace: time.Second},
			run.Agent{Slug: slug, Steps: []run.Step{{Name: "work", Idempotent: true, Run: work}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	start := func(r *run.Runner) func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%v", err)
			}
		}
	}

	// Runner a starts the run and is lost mid-step: its lease stays behind.
	a := newRunner("a")
	stopA := start(a)
	res, err := a.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: slug})
	if err != nil {
		stopA()
		t.Fatal(err)
	}
	select {
	case <-inA:
	case <-time.After(30 * time.Second):
		stopA()
		t.Fatal("runner a never started the step")
	}
	stopA()
	id := res.RunID
	st, err := a.Status(context.Background(), id)
	if err != nil || st.Lease == nil || st.RunnerLostAt != nil {
		t.Fatalf("after losing a: %+v, %v", st, err)
	}
	expiry := st.Lease.ExpiresAt

	// The Worker the page talks to serves runner b, which runs only later.
	b := newRunner("b")
	api, err := httpapi.New(httpapi.Config{Runner: b, Store: store, Events: true, EventPollInterval: 50 * time.Millisecond, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFeed := context.WithCancel(context.Background())
	feedDone := make(chan struct{})
	go func() { defer close(feedDone); _ = api.Run(fctx) }()
	srv := httptest.NewServer(api)
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
		stopFeed()
		<-feedDone
	}()

	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(2*time.Minute, closeBrowser)
	defer overall.Stop()

	lost := css(`#run-facts [data-runner="lost"]`)
	do(t, ctx, "open the run's page while its lease holds", 20*time.Second,
		chromedp.Navigate(srv.URL+"/ui/#/runs/"+id),
		chromedp.WaitVisible(css(`#run-status[data-status="running"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	if n := get(t, ctx, "count badges", chromedp.Evaluate[int](`document.querySelectorAll("[data-runner]").length`)); n != 0 {
		t.Fatalf("%d runner badges while the lease holds", n)
	}
	fake.Advance(lease + time.Second) // the lease lapses: no write, no event
	do(t, ctx, "see the runner lost, without a reload", 20*time.Second,
		chromedp.WaitVisible(lost),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	text := get(t, ctx, "read the badge", chromedp.Text(lost))
	at := get(t, ctx, "read the badge's time", chromedp.Evaluate[string](`document.querySelector('#run-facts [data-runner="lost"] time').getAttribute("datetime")`))
	if !strings.Contains(text, "runner lost") || at != expiry.Format(time.RFC3339) {
		t.Errorf("badge %q at %q, want runner lost at %s", text, at, expiry.Format(time.RFC3339))
	}
	do(t, ctx, "see it in the agent's run list", 20*time.Second,
		chromedp.Navigate(srv.URL+"/ui/#/"),
		chromedp.WaitVisible(css(`tr[data-run="`+id+`"] [data-runner="lost"]`)),
	)

	// Runner b takes the run over and finishes it.
	stopB := start(b)
	defer stopB()
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	st, err = b.Wait(wctx, id)
	cancel()
	if err != nil || st.Status != "completed" || st.TakenOverAt == nil {
		t.Fatalf("after the takeover: %+v, %v", st, err)
	}
	taken := css(`#run-facts [data-runner="taken-over"]`)
	do(t, ctx, "see it taken over", 20*time.Second,
		chromedp.Navigate(srv.URL+"/ui/#/runs/"+id),
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
		chromedp.WaitVisible(taken),
	)
	at = get(t, ctx, "read the takeover's time", chromedp.Evaluate[string](`document.querySelector('#run-facts [data-runner="taken-over"] time').getAttribute("datetime")`))
	if text := get(t, ctx, "read the badge", chromedp.Text(taken)); !strings.Contains(text, "taken over at") || at != st.TakenOverAt.Format(time.RFC3339) {
		t.Errorf("badge %q at %q, want taken over at %s", text, at, st.TakenOverAt.Format(time.RFC3339))
	}
	if n := get(t, ctx, "count lost badges", chromedp.Evaluate[int](`document.querySelectorAll('[data-runner="lost"]').length`)); n != 0 {
		t.Errorf("%d runner-lost badges after the takeover", n)
	}
}
