package page_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestScreenshots writes docs/live-page.png (a demo-approval run waiting
// for approval) and docs/jobs-page.png (the jobs page as admin, dead jobs shown)
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
	overall := time.AfterFunc(2*time.Minute, closeBrowser)
	defer overall.Stop()
	shoot := func(name string) {
		t.Helper()
		png := get(t, ctx, "screenshot "+name, chromedp.CaptureScreenshot())
		if len(png) > 300<<10 {
			t.Errorf("%s is %d bytes, over 300 KB", name, len(png))
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes", name, len(png))
	}

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
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- runner.Run(rctx) }()
	go func() { done <- api.Run(rctx) }()
	srv := httptest.NewServer(api)
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
		stop()
		for range 2 {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
		}
	}()
	res, err := runner.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "demo-approval", Trigger: "manual"})
	if err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "open the waiting run", 30*time.Second,
		chromedp.EmulateViewport(1200, 1150),
		chromedp.Navigate(srv.URL+"/ui/#/runs/"+res.RunID),
		chromedp.WaitVisible(css(`#run-status[data-status="awaiting_approval"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	shoot("live-page.png")

	w := startJobsWorker(t)
	defer w.stop()
	do(t, ctx, "open the jobs page", 30*time.Second,
		chromedp.EmulateViewport(1200, 900),
		chromedp.Navigate(w.URL+"/ui/#/jobs?status=DEAD"),
		// As admin, so the dead job shows its Requeue button.
		chromedp.Evaluate[chromedp.Void](`localStorage.setItem("conveyor.actor", "admin")`),
		chromedp.Reload(),
		chromedp.WaitVisible(css(`#jobs-body tr[data-status="DEAD"] [data-testid="job-requeue"]`)),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	shoot("jobs-page.png")
}
