package page_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestJobPageSnooze: a job whose handler snoozed shows the move RUNNING →
// QUEUED (snooze) on its timeline, its run with outcome QUEUED and the
// attempt given back, and when it may start again.
func TestJobPageSnooze(t *testing.T) {
	bin := chromium(t)
	ctx := context.Background()
	store := memstore.New()
	q, err := jobqueue.New(jobqueue.Config{Store: store, Logger: quiet, Types: map[lifecycle.JobType]jobqueue.TypeConfig{
		"POLL": {Handler: jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{}, jobqueue.Snooze(time.Hour)
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: "poll-1", JobType: "POLL"}); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w")
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	if j, err := c.Run(ctx, nil); err != nil || j.Status != lifecycle.JobQueued {
		t.Fatalf("run: %s, %v", j.Status, err)
	}
	url, bctx := openPage(t, bin, queueAPI(t, store, q))

	move := `#job-timeline li[data-from="RUNNING"][data-to="QUEUED"]`
	do(t, bctx, "open the snoozed job", 30*time.Second,
		chromedp.Navigate(url+"/ui/#/jobs/poll-1"),
		chromedp.WaitVisible(css(`#job-status[data-status="QUEUED"]`)),
		chromedp.WaitVisible(css(move)),
	)
	got := get(t, bctx, "read the page", chromedp.Evaluate[map[string]string](`(() => {
		const t = (sel) => { const el = document.querySelector(sel); return el ? el.textContent : ''; };
		const run = document.querySelector('#job-attempts-body tr[data-attempt="1"]');
		return { move: t('`+move+`'), outcome: run ? run.dataset.outcome : '', page: t('main') };
	})()`))
	if !strings.Contains(got["move"], "snooze") || got["outcome"] != "QUEUED" || !strings.Contains(got["page"], "not before") || !strings.Contains(got["page"], "0 / ") {
		t.Errorf("timeline move %q, run outcome %q; the page shows no start time or attempt 0:\n%s", got["move"], got["outcome"], got["page"])
	}
}
