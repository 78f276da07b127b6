package page_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// The jobs the jobs Worker holds: queued RESEARCH jobs of agent-a, BRIEF
// jobs of agent-b, one stand-alone BRIEF job (no run, no agent) and one
// dead job of agent-z, more than two pages of the page's list (25 a page).
const (
	researchJobs = 40
	briefJobs    = 20
	deadError    = "the notebook was deleted"
	// standAloneJob is the BRIEF job without a run or an agent.
	standAloneJob = "0-stand-alone" // first in job id order: on the first page
)

// jobsWorker is a Worker with a job queue: a real Queue and Runner on one
// memstore, the events feed and the page, served on 127.0.0.1.
type jobsWorker struct {
	URL   string
	queue *jobqueue.Queue
	dead  string // the dead job's id
	run   *run.Runner
	gate  *gate // in front of the API: holds an answer back when asked
	stop  func()
}

func startJobsWorker(t *testing.T) *jobsWorker {
	t.Helper()
	ctx := context.Background()
	store := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// One attempt and a 1 ms backoff: a job whose only attempt failed
	// permanently is DEAD at the next claim.
	q, err := jobqueue.New(jobqueue.Config{Store: store, Logger: quiet, MaxAttempts: 1, Backoff: []time.Duration{time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	w := &jobsWorker{queue: q}
	dead, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{RunID: "run-z", AgentSlug: "agent-z", JobType: lifecycle.JobResearch})
	if err != nil {
		t.Fatal(err)
	}
	w.dead = dead.JobID
	c, err := q.Claim(ctx, "page-test")
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	fail := func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New(deadError))
	}
	if j, err := c.Run(ctx, jobqueue.Handlers{CallNotebookLM: fail}); j.Status != lifecycle.JobRetryBackoff && j.Status != lifecycle.JobDead {
		t.Fatalf("the failing job is %s (%v), want RETRY_BACKOFF or DEAD", j.Status, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := q.Claim(ctx, "page-test"); err != nil { // it takes the job from FAILED to DEAD
			t.Fatal(err)
		}
		j, err := q.Get(ctx, lifecycle.ActorAdmin, w.dead)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == lifecycle.JobDead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing job is %s, not DEAD", j.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range researchJobs + briefJobs {
		n := jobqueue.NewJob{RunID: fmt.Sprintf("run-%02d", i), AgentSlug: "agent-a", JobType: lifecycle.JobResearch}
		if i >= researchJobs {
			n.AgentSlug, n.JobType = "agent-b", lifecycle.JobBrief
		}
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, n); err != nil {
			t.Fatal(err)
		}
	}
	// The stand-alone job is of priority 8 and not to start for an hour.
	if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: standAloneJob, JobType: lifecycle.JobBrief, Priority: 8, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}

	// The Runner serves one agent of each run machine, so the page knows
	// every run machine's spec from GET /agents.
	noop := []run.Step{{Name: "noop", Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet},
		run.Agent{Slug: "plain", Steps: noop},
		run.Agent{Slug: "cancelable", Machine: lifecycle.MachineCancelable, Steps: noop},
		run.Agent{Slug: "approval", Machine: lifecycle.MachineApproval, Steps: noop})
	if err != nil {
		t.Fatal(err)
	}
	w.run = runner
	api, err := httpapi.New(httpapi.Config{Runner: runner, Queue: q, Store: store, Events: true, EventPollInterval: 50 * time.Millisecond, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w.gate = newGate(api)
	s := serveWorker(w.gate)
	s.spawn(api.Run)
	w.URL = s.URL
	w.stop = func() { s.stop(t) }
	return w
}

// labelOverlaps lists, for every machine diagram on the page, the pairs of
// move labels whose boxes on screen intersect, and the labels that cover
// a state; it fails the test when the page shows no diagram.
func labelOverlaps(t *testing.T, ctx context.Context) []string {
	t.Helper()
	type result struct {
		Diagrams int      `json:"diagrams"`
		Labels   int      `json:"labels"`
		Overlaps []string `json:"overlaps"`
	}
	r := get(t, ctx, "measure the labels", chromedp.Evaluate[result](`(() => {
		const meet = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
		const out = { diagrams: 0, labels: 0, overlaps: [] };
		for (const svg of document.querySelectorAll('svg[data-testid="machine"]')) {
			out.diagrams++;
			const labels = [...svg.querySelectorAll('text.label')].map((el) => ({
				name: el.parentNode.dataset.from + '-' + el.textContent + '->' + el.parentNode.dataset.to, box: el.getBoundingClientRect() }));
			const states = [...svg.querySelectorAll('.state rect.outer')].map((el) => ({ name: el.parentNode.dataset.state, box: el.getBoundingClientRect() }));
			out.labels += labels.length;
			for (let i = 0; i < labels.length; i++) {
				if (labels[i].box.width === 0) out.overlaps.push(svg.dataset.machine + ': ' + labels[i].name + ' is not drawn');
				for (let j = i + 1; j < labels.length; j++) {
					if (meet(labels[i].box, labels[j].box)) out.overlaps.push(svg.dataset.machine + ': ' + labels[i].name + ' × ' + labels[j].name);
				}
				for (const st of states) {
					if (meet(labels[i].box, st.box)) out.overlaps.push(svg.dataset.machine + ': ' + labels[i].name + ' × state ' + st.name);
				}
			}
		}
		return out;
	})()`))
	if r.Diagrams == 0 || r.Labels == 0 {
		t.Fatalf("no diagram to measure (%d diagrams, %d labels)", r.Diagrams, r.Labels)
	}
	t.Logf("%d diagrams, %d labels measured", r.Diagrams, r.Labels)
	return r.Overlaps
}

// Every machine the SDK has is drawn on the machines page by dagre, and no
// label's box meets another's or a state's (before dagre, two labels of the
// approval machine read "c.failel").
func TestMachineDiagramsHaveNoOverlappingLabels(t *testing.T) {
	bin := chromium(t)
	w := startJobsWorker(t)
	defer w.stop()
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(2*time.Minute, closeBrowser)
	defer overall.Stop()

	do(t, ctx, "open the machines page", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/machines"),
		chromedp.WaitVisible(css(`section[data-machine="approval-run"] svg[data-testid="machine"]`)),
	)
	names := get(t, ctx, "list the diagrams", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('svg[data-testid="machine"]')].map((s) => s.dataset.machine)`))
	want := []string{"canonical-run", "cancelable-run", "approval-run", "run-step", "job", "general-job", "nlm-job", "inbox-entry"}
	if !slices.Equal(names, want) {
		t.Errorf("diagrams %v, want %v", names, want)
	}
	for _, o := range labelOverlaps(t, ctx) {
		t.Errorf("overlap: %s", o)
	}
	// Every move has its label, and the approval machine's parallel moves
	// to failed (fail, reject) are two labels.
	n := get(t, ctx, "count the labels", chromedp.Evaluate[int](
		`document.querySelectorAll('svg[data-machine="approval-run"] text.label').length`))
	if want := len(machine.ApprovalRun().Spec().Transitions); n != want {
		t.Errorf("approval-run shows %d labels, want its %d moves", n, want)
	}
}

// The jobs page: counts by state per type and agent, the quick filters,
// the list paged 25 at a time, the dead job with its error and code, and
// requeue offered by the job machine to the admin only.
func TestJobsPage(t *testing.T) {
	bin := chromium(t)
	w := startJobsWorker(t)
	defer w.stop()
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(3*time.Minute, closeBrowser)
	defer overall.Stop()

	const total = researchJobs + briefJobs + 2
	cell := func(typ, agent, state string) string {
		return `#job-counts tr[data-type="` + typ + `"][data-agent="` + agent + `"] td[data-state="` + state + `"]`
	}
	do(t, ctx, "open the jobs page from the nav", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/"),
		chromedp.WaitVisible(css(`[data-testid="nav-jobs"]`)),
		chromedp.Click(css(`[data-testid="nav-jobs"]`)),
		chromedp.WaitVisible(css(cell("RESEARCH", "agent-a", "QUEUED")+` a`)),
		chromedp.WaitVisible(css(`#jobs-body tr`)), // the list is read after the counts
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
	)
	counts := get(t, ctx, "read the counts", chromedp.Evaluate[map[string]string](`(() => {
		const c = (sel) => { const el = document.querySelector(sel); return el ? el.textContent : ''; };
		return {
			research: c('`+cell("RESEARCH", "agent-a", "QUEUED")+`'),
			brief: c('`+cell("BRIEF", "agent-b", "QUEUED")+`'),
			dead: c('`+cell("RESEARCH", "agent-z", "DEAD")+`'),
			standAlone: c('`+cell("BRIEF", "_type.BRIEF", "QUEUED")+`'),
			standAloneAgent: c('#job-counts tr[data-agent="_type.BRIEF"] td:nth-child(2)'),
			quickDead: document.querySelector('[data-testid="quick-DEAD"]').dataset.count,
		};
	})()`))
	if want := map[string]string{"research": fmt.Sprint(researchJobs), "brief": fmt.Sprint(briefJobs), "dead": "1", "quickDead": "1", "standAlone": "1", "standAloneAgent": "none (BRIEF lane)"}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v", counts, want)
	}

	// The stand-alone job shows its priority and when it may start; a job
	// enqueued without a priority shows the default.
	prio := get(t, ctx, "read the priorities", chromedp.Evaluate[[]string](`(() => {
		const row = (sel) => document.querySelector('#jobs-body tr' + sel);
		const text = (r, id) => { const el = r && r.querySelector('[data-testid="' + id + '"]'); return el ? el.textContent : ''; };
		const stand = row('[data-job="`+standAloneJob+`"]'), other = row(':not([data-job="`+standAloneJob+`"])');
		return [text(stand, 'job-priority'), text(stand, 'job-scheduled'), text(other, 'job-priority'), text(other, 'job-scheduled')];
	})()`))
	if prio[0] != "8" || !strings.HasPrefix(prio[1], "not before ") || prio[2] != "5" || prio[3] != "" {
		t.Errorf("priority, schedule of the delayed job %q %q, of another %q %q; want 8, not before ..., 5, none", prio[0], prio[1], prio[2], prio[3])
	}

	// Paging: every job once over the pages, 25 a page, then no next page.
	rows := `[...document.querySelectorAll('#jobs-body tr')].map((r) => r.dataset.job)`
	seen := map[string]bool{}
	var sizes []int
	for page := 0; ; page++ {
		ids := get(t, ctx, "read the page", chromedp.Evaluate[[]string](rows))
		sizes = append(sizes, len(ids))
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("page %d shows job %s again", page, id)
			}
			seen[id] = true
		}
		if hidden := get(t, ctx, "read the pager", chromedp.Evaluate[bool](`document.querySelector('[data-testid="jobs-next"]').hidden`)); hidden {
			break
		}
		if page > 5 {
			t.Fatalf("still a next page after %d pages", page)
		}
		do(t, ctx, "go to the next page", 20*time.Second,
			chromedp.Evaluate[chromedp.Void](`window.__first = document.querySelector('#jobs-body tr').dataset.job`),
			chromedp.Click(css(`[data-testid="jobs-next"]`)),
			chromedp.Poll[chromedp.Void](`document.querySelector('#jobs-body tr') && document.querySelector('#jobs-body tr').dataset.job !== window.__first`,
				chromedp.WithPollingInterval(50*time.Millisecond)),
		)
	}
	if len(seen) != total || sizes[0] != 25 {
		t.Errorf("pages of %v jobs, %d in all; want pages of 25 and %d in all", sizes, len(seen), total)
	}

	// The dead job, by the quick filter: its error and its code.
	deadRow := css(`#jobs-body tr[data-job="` + w.dead + `"][data-status="DEAD"]`)
	do(t, ctx, "filter the dead jobs", 20*time.Second,
		chromedp.Click(css(`[data-testid="quick-DEAD"]`)),
		chromedp.WaitVisible(deadRow),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#jobs-body tr').length === 1`, chromedp.WithPollingInterval(50*time.Millisecond)),
	)
	if h := get(t, ctx, "read the hash", chromedp.Evaluate[string](`location.hash`)); h != "#/jobs?status=DEAD" {
		t.Errorf("hash %q, want the filter in it", h)
	}
	shown := get(t, ctx, "read the error", chromedp.Evaluate[[]string](`[
		document.querySelector('#jobs-body tr [data-testid="job-error"]').textContent,
		document.querySelector('#jobs-body tr [data-testid="error-code"]').textContent]`))
	if !strings.Contains(shown[0], deadError) || shown[1] != "PERMANENT" {
		t.Errorf("dead job shows error %q, code %q; want %q, PERMANENT", shown[0], shown[1], deadError)
	}
	// As the gateway (the default actor) the machine offers no requeue.
	if n := get(t, ctx, "count requeue buttons", chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="job-requeue"]').length`)); n != 0 {
		t.Errorf("%d requeue buttons for the gateway", n)
	}

	// As admin the dead job has its requeue; it lands as QUEUED.
	do(t, ctx, "requeue as admin", 20*time.Second,
		chromedp.SetValue(css(`#actor`), "admin"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#actor").dispatchEvent(new Event("change"))`),
		chromedp.WaitVisible(css(`[data-testid="job-requeue"][data-job="`+w.dead+`"]`)),
		chromedp.Click(css(`[data-testid="job-requeue"][data-job="`+w.dead+`"]`)),
		chromedp.WaitVisible(css(`#jobs-result`)),
		chromedp.WaitNotPresent(deadRow),
		chromedp.Poll[chromedp.Void](`document.querySelector('[data-testid="quick-DEAD"]').dataset.count === "0"`, chromedp.WithPollingInterval(50*time.Millisecond)),
	)
	j, err := w.queue.Get(context.Background(), lifecycle.ActorAdmin, w.dead)
	if err != nil || j.Status != lifecycle.JobQueued {
		t.Errorf("after the requeue the job is %s (%v), want QUEUED", j.Status, err)
	}
	if msg := get(t, ctx, "read the result", chromedp.Text(css(`#jobs-result`))); !strings.Contains(msg, "QUEUED") {
		t.Errorf("result shown %q", msg)
	}

	// A filter by type and agent, as the selects set it.
	do(t, ctx, "filter BRIEF jobs", 20*time.Second,
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('#jobs-status'); s.value = ''; s.dispatchEvent(new Event('change')); })()`),
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('#jobs-type'); s.value = 'BRIEF'; s.dispatchEvent(new Event('change')); })()`),
		chromedp.Poll[chromedp.Void](`(() => { const r = [...document.querySelectorAll('#jobs-body tr')];
			return r.length === 21 && r.every((x) => x.children[1].textContent === 'BRIEF'); })()`, chromedp.WithPollingInterval(50*time.Millisecond)),
	)
	if next := get(t, ctx, "read the pager", chromedp.Evaluate[bool](`document.querySelector('[data-testid="jobs-next"]').hidden`)); !next {
		t.Errorf("a next page is offered for 21 BRIEF jobs")
	}
}

// The jobs list draws the answer to its latest read only, and a read that
// changes nothing keeps the rows on screen, buttons included. A list read
// begun before another filter was picked answers after that filter's read:
// it is dropped (drawn, it would empty the list: no BRIEF job is dead). And a row that a later read shows unchanged is the same node, so
// a click aimed at its button (or the focus on it) is never lost to a
// redraw: before, every read replaced every row, and a requeue click that
// came between the page's two reads on opening (the first draw, then the
// one when the event stream opens) hit a removed button ("Could not find
// node with given id" on a loaded machine).
func TestJobsPageDrawsTheLatestReadAndKeepsItsRows(t *testing.T) {
	w, ctx := jobsPageSession(t)
	button := `[data-testid="job-requeue"][data-job="` + w.dead + `"]`
	do(t, ctx, "open the jobs page as admin", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/jobs"),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
		chromedp.SetValue(css(`#actor`), "admin"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#actor").dispatchEvent(new Event("change"))`),
		chromedp.WaitVisible(css(`[data-testid="quick-DEAD"][data-count="1"]`)),
		chromedp.WaitVisible(css(`#jobs-body tr`)),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
		settled(),
	)

	// A read of the BRIEF jobs (none of them dead) is held back; the dead
	// jobs are picked meanwhile.
	held, release := w.gate.hold(func(r *http.Request) bool {
		q := r.URL.Query()
		return r.Method == http.MethodGet && r.URL.Path == "/jobs" && q.Get("limit") == "25" && q.Get("type") == "BRIEF"
	})
	defer release()
	do(t, ctx, "pick the BRIEF jobs", 20*time.Second,
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('#jobs-type'); s.value = 'BRIEF'; s.dispatchEvent(new Event('change')); })()`))
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the page did not read the BRIEF jobs")
	}
	do(t, ctx, "pick the dead jobs", 20*time.Second,
		chromedp.Click(css(`[data-testid="quick-DEAD"]`)),
		chromedp.WaitVisible(css(button)),
		chromedp.Evaluate[chromedp.Void](`window.__button = document.querySelector('`+button+`')`),
	)
	release()
	do(t, ctx, "let the held read answer", 20*time.Second, settled())
	rows := `[...document.querySelectorAll('#jobs-body tr')].map((r) => r.dataset.job)`
	if ids := get(t, ctx, "read the list", chromedp.Evaluate[[]string](rows)); len(ids) != 1 || ids[0] != w.dead {
		t.Fatalf("after the older read answered the list shows %v, want the dead job %s only", ids, w.dead)
	}

	// A read that finds the same job keeps its row and its button.
	do(t, ctx, "read the dead jobs again", 20*time.Second,
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('#jobs-status'); s.value = 'DEAD'; s.dispatchEvent(new Event('change')); })()`),
		settled(),
	)
	if same := get(t, ctx, "compare the button", chromedp.Evaluate[bool](`document.querySelector('`+button+`') === window.__button`)); !same {
		t.Fatal("a read that changed nothing replaced the requeue button")
	}
	do(t, ctx, "requeue", 20*time.Second,
		chromedp.Click(css(button)),
		chromedp.WaitNotPresent(css(`#jobs-body tr[data-job="`+w.dead+`"]`)),
	)
}

// TestJobsPageCountsFollowEveryMove: the counts are one read of GET
// /stats/jobs/counts, made with every read of the list, so a job that
// moves while the view is open shows in the counts at once (they equal
// the list's by state after each move); the page
// never reads the jobs to count them. Before, the counts read up to 40
// pages of 500 jobs and recounted at most every 30 s, and disagreed with
// the list after a move.
func TestJobsPageCountsFollowEveryMove(t *testing.T) {
	w, ctx := jobsPageSession(t)
	do(t, ctx, "open the jobs page", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/jobs"),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
		chromedp.WaitVisible(css(`[data-testid="quick-DEAD"][data-count="1"]`)),
		settled(),
	)
	counted := w.gate.readsOf("/stats/jobs/counts")
	if counted == 0 {
		t.Fatal("the page did not read the counts")
	}
	ok := func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: json.RawMessage(`{"summary":"ok"}`)}, nil
	}
	// The page's totals, by state, as the list's: every state's count.
	totals := func() string {
		byState := map[lifecycle.JobState]int{}
		for j, err := range w.queue.List(context.Background(), lifecycle.ActorAdmin) {
			if err != nil {
				t.Fatal(err)
			}
			byState[j.Status]++
		}
		return fmt.Sprint(byState)
	}
	shown := `(() => { const out = {};
		for (const td of document.querySelectorAll('#job-counts tr.total td[data-state]')) {
			const a = td.querySelector('a'); if (a) out[td.dataset.state] = Number(a.dataset.count); }
		return 'map[' + Object.keys(out).sort().map((k) => k + ':' + out[k]).join(' ') + ']'; })()`
	for i := 1; i <= 3; i++ {
		c, err := w.queue.Claim(context.Background(), "page-test")
		if err != nil || c == nil {
			t.Fatalf("claim: %v, %v", c, err)
		}
		if _, err := c.Run(context.Background(), jobqueue.Handlers{CallNotebookLM: ok}); err != nil {
			t.Fatal(err)
		}
		want := totals()
		do(t, ctx, fmt.Sprintf("see move %d counted: %s", i, want), 20*time.Second,
			chromedp.Poll[chromedp.Void](shown+` === '`+want+`'`, chromedp.WithPollingInterval(20*time.Millisecond)))
	}
	do(t, ctx, "settle", 20*time.Second, settled())
	if got := w.gate.readsOf("/stats/jobs/counts"); got <= counted {
		t.Errorf("the counts were read %d times, %d before the moves", got, counted)
	}
	if n := w.gate.jobReadsOf("500"); n != 0 {
		t.Errorf("the page read the jobs %d times to count them", n)
	}
}

// jobsPageSession starts a jobs Worker and a browser for a test, both
// stopped when it ends (the browser after 3 minutes at the latest).
func jobsPageSession(t *testing.T) (*jobsWorker, context.Context) {
	t.Helper()
	bin := chromium(t)
	w := startJobsWorker(t)
	t.Cleanup(w.stop)
	ctx, closeBrowser := browser(t, bin)
	overall := time.AfterFunc(3*time.Minute, closeBrowser)
	t.Cleanup(func() { overall.Stop(); closeBrowser() })
	return w, ctx
}

// settled waits until every list read the jobs page asked for has
// answered and been drawn or dropped: the list is aria-busy until then.
func settled() chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](`!document.querySelector('#jobs').hasAttribute('aria-busy')`, chromedp.WithPollingInterval(20*time.Millisecond))
}
