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

// TestProposalsPage: a completed run links to the proposals its steps
// created; the proposals view lists the pending ones, newest first, each
// linking to its run; the gateway's Apply takes one off the list and its
// page shows it applied. With CONVEYOR_SCREENSHOTS set it writes
// docs/proposals.png (the pending list) and docs/run-proposals.png (the
// completed run's links) into that folder.
func TestProposalsPage(t *testing.T) {
	bin := chromium(t)
	ctx := context.Background()
	store := memstore.New()
	propose := func(names ...string) func(context.Context, run.StepInput) (run.StepOutput, error) {
		return func(context.Context, run.StepInput) (run.StepOutput, error) {
			files := map[string][]byte{}
			for _, n := range names {
				files[n] = []byte(`{"edit":"…"}`)
			}
			return run.StepOutput{Summary: "proposed", Files: files, Propose: names}, nil
		}
	}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet, PollInterval: 20 * time.Millisecond},
		run.Agent{Slug: "archivist-violin", Steps: []run.Step{
			{Name: "load-context", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Summary: "context"}, nil
			}},
			{Name: "create-proposal", Run: propose("sonata-bwv1001.json", "partita-bwv1002.json")}}},
		run.Agent{Slug: "summariser", Steps: []run.Step{{Name: "create-proposal", Run: propose("summary.json")}}})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: runner, Store: store, Events: true, EventPollInterval: 50 * time.Millisecond, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runWhileTesting(t, runner.Run, api.Run)

	first := submitAndWait(t, runner, "archivist-violin")
	second := submitAndWait(t, runner, "summariser")
	st, err := runner.Status(ctx, first)
	if err != nil || len(st.ProposalsCreated) != 2 {
		t.Fatalf("status %+v, %v", st, err)
	}

	url, bctx := openPage(t, bin, api)
	do(t, bctx, "open the completed run", 30*time.Second,
		chromedp.EmulateViewport(1100, 700),
		chromedp.Navigate(url+"/ui/#/runs/"+first),
		chromedp.WaitVisible(css(`#run-proposals a[data-testid="proposal-link"]`)),
	)
	links := get(t, bctx, "read the run's proposal links", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#run-proposals a')].map((a) => a.getAttribute('href'))`))
	if len(links) != 2 || links[0] != "#/proposals/"+st.ProposalsCreated[0] || links[1] != "#/proposals/"+st.ProposalsCreated[1] {
		t.Fatalf("the run links %v, want its proposals %v", links, st.ProposalsCreated)
	}
	screenshot(t, bctx, "run-proposals.png")

	do(t, bctx, "open the proposals view", 30*time.Second,
		chromedp.Click(css(`a[data-testid="nav-proposals"]`)),
		chromedp.WaitVisible(css(`#proposals-body tr[data-proposal]`)),
		chromedp.WaitNotPresent(css(`#proposals[aria-busy]`)),
	)
	rows := get(t, bctx, "read the rows", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#proposals-body tr')].map((tr) => tr.dataset.proposal + ' ' + tr.children[1].textContent)`))
	// Newest first: the summariser's run was submitted last.
	if len(rows) != 3 || !strings.HasSuffix(rows[0], " "+second) || !strings.HasSuffix(rows[2], " "+first) {
		t.Fatalf("rows %v, want the summariser's (%s) first and %s's last", rows, second, first)
	}
	screenshot(t, bctx, "proposals.png")

	target := st.ProposalsCreated[0]
	do(t, bctx, "apply one as the gateway", 30*time.Second,
		chromedp.Click(css(`#proposals-body tr[data-proposal="`+target+`"] button[data-decide="applied"]`)),
		chromedp.WaitNotPresent(css(`#proposals-body tr[data-proposal="`+target+`"]`)),
		chromedp.Navigate(url+"/ui/#/proposals/"+target),
		chromedp.WaitVisible(css(`#proposal-status[data-status="applied"]`)),
	)
	if n := get(t, bctx, "count the buttons", chromedp.Evaluate[int](`document.querySelectorAll('#proposal-actions button').length`)); n != 0 {
		t.Errorf("an applied proposal offers %d buttons", n)
	}
	do(t, bctx, "a frontend is refused", 30*time.Second,
		chromedp.SetValue(css(`#actor`), "frontend"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#actor").dispatchEvent(new Event("change"))`),
		chromedp.Navigate(url+"/ui/#/proposals"),
		chromedp.WaitVisible(css(`#proposals-body tr[data-proposal="`+st.ProposalsCreated[1]+`"] button[data-decide="rejected"]`)),
		chromedp.Click(css(`#proposals-body tr[data-proposal="`+st.ProposalsCreated[1]+`"] button[data-decide="rejected"]`)),
		chromedp.WaitVisible(css(`#proposals-error`)),
	)
	if msg := get(t, bctx, "read the refusal", chromedp.Text(css(`#proposals-error`))); !strings.Contains(msg, "403") {
		t.Errorf("refusal %q", msg)
	}
}

// submitAndWait submits a run of agent and waits until it completes.
func submitAndWait(t *testing.T, r *run.Runner, agent string) string {
	t.Helper()
	ctx := context.Background()
	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: agent})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, err := r.Status(ctx, res.RunID); err == nil && st.Status == "completed" {
			return res.RunID
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("run %s of %s did not complete", res.RunID, agent)
	return ""
}
