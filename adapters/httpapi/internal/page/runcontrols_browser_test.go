package page_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// The run page offers a cancel only where the run's machine has one: a
// canonical run shows no "Cancel run" (a red button always disabled) but
// a note saying why; an approval run shows the button. It shows who
// decided the approval, why, and the payload handed to the next steps.
func TestRunPageCancelFollowsTheMachine(t *testing.T) {
	bin := chromium(t)
	ctx := context.Background()
	store := memstore.New()
	done := func(context.Context, run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "done"}, nil
	}
	gate := func(context.Context, run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "asks", Await: &run.Await{Approval: "publish"}}, nil
	}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet, PollInterval: 50 * time.Millisecond, ShutdownGrace: time.Second},
		run.Agent{Slug: "plain", Steps: []run.Step{{Name: "only", Run: done}}},
		run.Agent{Slug: "gated", Machine: lifecycle.MachineApproval, Steps: []run.Step{{Name: "draft", Run: gate}, {Name: "publish", Run: done}}})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: runner, Store: store, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runWhileTesting(t, runner.Run)
	submit := func(slug string, want string) string {
		t.Helper()
		res, err := runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: slug})
		if err != nil {
			t.Fatal(err)
		}
		waitStatus(t, runner, res.RunID, want)
		return res.RunID
	}
	plain, gated := submit("plain", "completed"), submit("gated", "awaiting_approval")

	url, bctx := openPage(t, bin, api)
	visible := `(sel) => { const el = document.querySelector(sel); return !!el && !el.hidden && el.getClientRects().length > 0; }`

	do(t, bctx, "open the canonical run", 30*time.Second,
		chromedp.Navigate(url+"/ui/#/runs/"+plain),
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
		chromedp.WaitVisible(css(`#cancel-note`)),
	)
	if get(t, bctx, "is the cancel button shown", chromedp.Evaluate[bool](`(`+visible+`)('#btn-cancel')`)) {
		t.Error("a canonical run shows a Cancel run button")
	}
	if note := get(t, bctx, "read the note", chromedp.Text(css(`#cancel-note`))); !strings.Contains(note, "canonical-run machine cannot be cancelled") {
		t.Errorf("the note says %q", note)
	}

	do(t, bctx, "open the approval run", 30*time.Second,
		chromedp.Navigate(url+"/ui/#/runs/"+gated),
		chromedp.WaitVisible(css(`#run-status[data-status="awaiting_approval"]`)),
		chromedp.WaitVisible(css(`#btn-cancel`)),
	)
	if get(t, bctx, "is the note shown", chromedp.Evaluate[bool](`(`+visible+`)('#cancel-note')`)) {
		t.Error("an approval run shows the no-cancel note")
	}
	if _, err := runner.Approve(ctx, gated, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner", Reason: "fine",
		Payload: json.RawMessage(`{"title":"v2"}`)}); err != nil {
		t.Fatal(err)
	}
	do(t, bctx, "see the decision", 30*time.Second,
		chromedp.Reload(),
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
	)
	got := get(t, bctx, "read the approval", chromedp.Text(css(`#run-approval`)))
	for _, want := range []string{"publish", "approved", "by owner", `"fine"`, "payload 14 B"} {
		if !strings.Contains(got, want) {
			t.Errorf("the approval reads %q, want it to say %q", got, want)
		}
	}
}
