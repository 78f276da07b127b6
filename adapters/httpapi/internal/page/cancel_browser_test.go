package page_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The jobs page of a queue of a user's job type alone: its counts have the
// general machine's columns (RUNNING, CANCELLED), none of the NLM
// pipeline's stages; the admin is offered Cancel on a QUEUED job, the
// gateway is not, and the cancelled job shows CANCELLED.
func TestJobsPageGeneralMachineAndCancel(t *testing.T) {
	bin := chromium(t)
	ctx := context.Background()
	store := memstore.New()
	q, err := jobqueue.New(jobqueue.Config{Store: store, Logger: quiet, Types: map[lifecycle.JobType]jobqueue.TypeConfig{
		"SEND_EMAIL": {Handler: jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{Content: json.RawMessage(`{}`)}, nil
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"email-1", "email-2"} {
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: id, JobType: "SEND_EMAIL", AgentSlug: "mailer"}); err != nil {
			t.Fatal(err)
		}
	}
	url, bctx := openPage(t, bin, queueAPI(t, store, q))

	row := `#jobs-body tr[data-job="email-1"]`
	do(t, bctx, "open the jobs page", 30*time.Second,
		chromedp.Navigate(url+"/ui/#/jobs"),
		chromedp.WaitVisible(css(`#job-counts tr[data-type="SEND_EMAIL"] td[data-state="QUEUED"] a`)),
		chromedp.WaitVisible(css(row)),
	)
	cols := get(t, bctx, "read the columns", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#job-counts thead th')].map((th) => th.title).filter(Boolean)`))
	for _, want := range []string{"QUEUED", "RUNNING", "COMPLETE", "DEAD", "CANCELLED"} {
		if !slices.Contains(cols, want) {
			t.Errorf("columns %v lack %s", cols, want)
		}
	}
	for _, stage := range []string{"CONTEXT_ASSEMBLY", "NOTEBOOKLM_CALL", "ARTIFACT_WRITE"} {
		if slices.Contains(cols, stage) {
			t.Errorf("columns %v show the NLM stage %s for a user's type", cols, stage)
		}
	}
	if n := get(t, bctx, "count cancel buttons", chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="job-cancel"]').length`)); n != 0 {
		t.Errorf("%d cancel buttons for the gateway", n)
	}
	do(t, bctx, "cancel as admin", 30*time.Second,
		chromedp.SetValue(css(`#actor`), "admin"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#actor").dispatchEvent(new Event("change"))`),
		chromedp.WaitVisible(css(`[data-testid="job-cancel"][data-job="email-1"]`)),
		chromedp.Click(css(`[data-testid="job-cancel"][data-job="email-1"]`)),
		chromedp.WaitVisible(css(`#jobs-result`)),
		chromedp.WaitVisible(css(`#jobs-body tr[data-job="email-1"][data-status="CANCELLED"]`)),
	)
	j, err := q.Get(ctx, lifecycle.ActorAdmin, "email-1")
	if err != nil || j.Status != lifecycle.JobCancelled {
		t.Errorf("after the click the job is %s (%v), want CANCELLED", j.Status, err)
	}
	if n := get(t, bctx, "count cancel buttons", chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="job-cancel"][data-job="email-1"]').length`)); n != 0 {
		t.Errorf("a cancelled job still offers Cancel")
	}
}
