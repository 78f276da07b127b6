package webhook_test

import (
	"context"
	"testing"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// A GitHub delivery's run carries its repository, pull request and
// delivery id (trigger_source), and is listed among its repository's
// runs, newest first; an issues event names its repository but no pull
// request (docs/spec.md#run-status).
func TestGitHubRunNamesRepoAndPR(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	first := r.send(gh("d-1", "pull_request", ghPR("opened", 7)))
	r.clk.Advance(1e9)
	second := r.send(gh("d-2", "issues", `{"action":"opened","issue":{"number":3},"repository":{"full_name":"octo/repo"},"sender":{"login":"mona"}}`))
	if first.runID == "" || second.runID == "" {
		t.Fatalf("runs not started: %+v %+v", first, second)
	}
	ctx := context.Background()
	pr, err := r.runner.Status(ctx, first.runID)
	if err != nil {
		t.Fatal(err)
	}
	if pr.RepoID != "octo/repo" || pr.PRID != "7" || pr.PRURL != "https://github.com/octo/repo/pull/7" {
		t.Errorf("pull request run: repo %q pr %q url %q", pr.RepoID, pr.PRID, pr.PRURL)
	}
	want := lifecycle.TriggerSource{Source: "webhook", UserID: "mona", WebhookEventID: "d-1"}
	if pr.TriggerSource == nil || *pr.TriggerSource != want || pr.Trigger != "event" {
		t.Errorf("trigger %q, trigger_source %+v; want event, %+v", pr.Trigger, pr.TriggerSource, want)
	}
	issue, err := r.runner.Status(ctx, second.runID)
	if err != nil {
		t.Fatal(err)
	}
	if issue.RepoID != "octo/repo" || issue.PRID != "" || issue.PRURL != "" {
		t.Errorf("issue run: repo %q pr %q url %q; want octo/repo and no pull request", issue.RepoID, issue.PRID, issue.PRURL)
	}
	page, err := r.runner.ListRuns(ctx, run.RunQuery{Repo: "octo/repo"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range page.Runs {
		ids = append(ids, d.RunID)
	}
	if len(ids) != 2 || ids[0] != second.runID || ids[1] != first.runID {
		t.Errorf("runs of octo/repo %v; want newest first [%s %s]", ids, second.runID, first.runID)
	}
	if other, err := r.runner.ListRuns(ctx, run.RunQuery{Repo: "octo/other"}); err != nil || len(other.Runs) != 0 {
		t.Errorf("runs of octo/other: %v, %v; want none", other.Runs, err)
	}
}
