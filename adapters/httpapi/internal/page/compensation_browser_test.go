package page_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// The run page of a run canceled at its gate after two steps that can be
// undone shows a Compensation section: one row per compensation, in the
// order they ran, a failed one with its error. A run without
// compensations shows no such section.
func TestRunPageShowsCompensation(t *testing.T) {
	bin := chromium(t)
	ctx := context.Background()
	store := memstore.New()
	step := func(name string, await *run.Await, undo error) run.Step {
		return run.Step{Name: name,
			Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Summary: name, Await: await}, nil
			},
			Compensate: func(context.Context, run.CompensateInput) error { return undo }}
	}
	refused := &lifecycle.RunError{Code: "UPSTREAM_UNAVAILABLE", Message: "refund refused", Permanent: true}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet, PollInterval: 50 * time.Millisecond, ShutdownGrace: time.Second},
		run.Agent{Slug: "order", Machine: lifecycle.MachineApproval, Steps: []run.Step{
			step("reserve", nil, nil), step("charge", &run.Await{Approval: "ship"}, refused), step("ship", nil, nil)}},
		run.Agent{Slug: "plain", Steps: []run.Step{{Name: "only", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{}, nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: runner, Store: store, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runWhileTesting(t, runner.Run)
	res, err := runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "order"})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, runner, res.RunID, "awaiting_approval")
	if _, err := runner.Cancel(ctx, res.RunID, lifecycle.ActorGateway, run.CancelRequest{Reason: "out of stock"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, runner, res.RunID, "cancelled")
	plain, err := runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, runner, plain.RunID, "completed")

	url, bctx := openPage(t, bin, api)
	do(t, bctx, "open the compensated run", 30*time.Second,
		chromedp.Navigate(url+"/ui/#/runs/"+res.RunID),
		chromedp.WaitVisible(css(`#run-status[data-status="cancelled"]`)),
		chromedp.WaitVisible(css(`#compensation tr[data-step="reserve"]`)),
	)
	rows := get(t, bctx, "read the rows", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#compensation-body tr')].map((r) => r.dataset.step + ' ' + r.dataset.outcome + ' ' + r.textContent)`))
	if len(rows) != 2 || !strings.HasPrefix(rows[0], "charge failed") || !strings.Contains(rows[0], "refund refused") ||
		!strings.HasPrefix(rows[1], "reserve compensated") {
		t.Errorf("compensation rows %q", rows)
	}
	do(t, bctx, "open the plain run", 30*time.Second,
		chromedp.Navigate(url+"/ui/#/runs/"+plain.RunID),
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
	)
	if shown := get(t, bctx, "is the section shown", chromedp.Evaluate[bool](`!document.querySelector('#compensation').hidden`)); shown {
		t.Error("a run without compensations shows a Compensation section")
	}
}
