package page_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestScreenshots writes docs/live-page.png (a demo-approval run waiting
// for approval), docs/jobs-page.png (the jobs page as admin, dead jobs
// shown), docs/queues.png (its queues panel, the default queue paused), docs/job-page.png (a job
// that failed twice and completed) and docs/charts.png (the last hour of
// a busy queue, the jobs page's charts and counts)
// into the folder CONVEYOR_SCREENSHOTS names; without it the test is
// skipped. From the repository's root:
//
//	CONVEYOR_SCREENSHOTS=$PWD/docs go test -run TestScreenshots ./adapters/httpapi/internal/page/
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("CONVEYOR_SCREENSHOTS")
	if dir == "" {
		t.Skip("set CONVEYOR_SCREENSHOTS to the folder the screenshots go to (docs/)")
	}
	bin := chromium(t)
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(3*time.Minute, closeBrowser)
	defer overall.Stop()
	shoot := func(name string) { t.Helper(); screenshot(t, ctx, name) }

	// The run page: a run of the approval machine whose first step asked
	// for approval of "publish".
	store := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet}, run.Agent{
		Slug: "demo-approval", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{
			{Name: "draft", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Summary: "draft written", Await: &run.Await{Approval: "publish"}}, nil
			}},
			{Name: "publish", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Summary: "published"}, nil
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: runner, Store: store, Events: true, EventPollInterval: 50 * time.Millisecond, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := serveWorker(api)
	s.spawn(runner.Run)
	s.spawn(api.Run)
	defer s.stop(t)
	res, err := runner.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "demo-approval", Trigger: "manual"})
	if err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "open the waiting run", 30*time.Second,
		chromedp.EmulateViewport(1200, 1150),
		chromedp.Navigate(s.URL+"/ui/#/runs/"+res.RunID),
		chromedp.WaitVisible(css(`#run-status[data-status="awaiting_approval"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	shoot("live-page.png")

	w := startJobsWorker(t)
	defer w.stop()
	do(t, ctx, "open the jobs page", 30*time.Second,
		chromedp.EmulateViewport(1200, 1280), // the charts, the counts and the list
		chromedp.Navigate(w.URL+"/ui/#/jobs?status=DEAD"),
		// As admin, so the dead job shows its Requeue button.
		chromedp.Evaluate[chromedp.Void](`localStorage.setItem("conveyor.actor", "admin")`),
		chromedp.Reload(),
		chromedp.WaitVisible(css(`#jobs-body tr[data-status="DEAD"] [data-testid="job-requeue"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	shoot("jobs-page.png")

	// The queues panel of the same page, a worker running a job of one
	// lane, its queue paused (the job runs on; no other starts).
	held, err := w.queue.Claim(context.Background(), "page-test")
	if err != nil || held == nil {
		t.Fatalf("claim: %v, %v", held, err)
	}
	if err := (jobqueue.Operator{Queue: w.queue}).SetPaused(context.Background(), lifecycle.ActorAdmin, "default", true); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "show the queues", 30*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#queues-h').scrollIntoView()`),
		chromedp.WaitVisible(css(`#queues-body tr[data-running="true"]`)),
		chromedp.WaitVisible(css(`#named-queues-body tr[data-paused="true"] [data-testid="resume-queue"]`)),
	)
	shoot("queues.png")
	if err := (jobqueue.Operator{Queue: w.queue}).SetPaused(context.Background(), lifecycle.ActorAdmin, "default", false); err != nil {
		t.Fatal(err)
	}
	if _, err := held.Run(context.Background(), jobqueue.Handlers{CallNotebookLM: otherFails}); err != nil {
		t.Fatal(err)
	}

	// A job page: a job that failed twice (each attempt with its own
	// error) and then completed, with its arguments and its result.
	id := detailJob(t, w)
	do(t, ctx, "open the job page", 30*time.Second,
		chromedp.EmulateViewport(1200, 1760),
		chromedp.Navigate(w.URL+"/ui/#/jobs/"+id),
		chromedp.WaitVisible(css(`#job-status[data-status="COMPLETE"]`)),
		chromedp.WaitVisible(css(`#job-attempts-body tr[data-attempt="3"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	shoot("job-page.png")

	// The charts and the counts of a queue whose last hour was busy.
	busy := startBusyHour(t)
	do(t, ctx, "open the charts", 30*time.Second,
		chromedp.EmulateViewport(1200, 640),
		chromedp.Navigate(busy.URL+"/ui/#/jobs"),
		chromedp.Reload(),
		chromedp.WaitVisible(css(`#charts svg[data-chart="latency"] circle.point`)),
		chromedp.WaitVisible(css(`#job-counts tr.total td[data-state="COMPLETE"] a`)),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#charts').scrollIntoView()`),
	)
	shoot("charts.png")
}

// detailJob runs a job of its own agent on w's queue to COMPLETE after two
// failed attempts and returns its id: w's other jobs are left alone (its
// agent's lane is the only one a claim for it finds, as the claims here
// name the lane by running until this job is the one picked).
func detailJob(t *testing.T, w *jobsWorker) string {
	t.Helper()
	ctx := context.Background()
	job, err := w.queue.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: "job_send-welcome-ada_01JD9ZQK3M", RunID: "run_2026-11-28_onboarding",
		JobType: lifecycle.JobBrief, AgentSlug: "mailer", MaxAttempts: 3,
		Payload: json.RawMessage(`{"to":"ada@example.com","template":"welcome","locale":"en-GB","vars":{"name":"Ada","plan":"team"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	fails := []error{errors.New("smtp: 421 4.7.0 try again later"), errors.New("smtp: dial tcp 10.0.4.2:587: i/o timeout")}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("the job did not complete")
		}
		c, err := w.queue.Claim(ctx, "page-test")
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if c.Job().JobID != job.JobID {
			// Another job of w: ended (DEAD), as no handler here does its type.
			if _, err := c.Run(ctx, jobqueue.Handlers{CallNotebookLM: otherFails}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		h := jobqueue.Handlers{CallNotebookLM: briefOK}
		if a := c.Job().Attempt; a <= len(fails) {
			time.Sleep(40 * time.Millisecond) // an attempt that takes a while
			h.CallNotebookLM = func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
				return lifecycle.JobOutput{}, fails[a-1]
			}
		}
		j, err := c.Run(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == lifecycle.JobComplete {
			return j.JobID
		}
	}
}

func briefOK(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
	return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"Welcome, Ada","body":"Your team plan is ready.","entity_map":{},"word_count":5}`), Tags: []string{"welcome"}}, nil
}

func otherFails(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
	return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("not this test's job"))
}
