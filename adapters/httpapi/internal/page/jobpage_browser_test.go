package page_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// asAdmin picks the admin actor in the header (the view opens again).
func asAdmin(then ...chromedp.Action[chromedp.Void]) []chromedp.Action[chromedp.Void] {
	return append([]chromedp.Action[chromedp.Void]{
		chromedp.SetValue(css(`#actor`), "admin"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#actor").dispatchEvent(new Event("change"))`),
	}, then...)
}

// clickFresh clicks the element sel matches at the moment of the click,
// once it is shown: a panel the page draws again (the view opening once
// more after the actor changed, a refresh) replaces the node a
// WaitVisible found, and chromedp's Click on that node then fails with
// "Could not find node with given id" (seen in CI).
func clickFresh(sel string) chromedp.Action[chromedp.Void] {
	q, _ := json.Marshal(sel)
	return chromedp.Poll[chromedp.Void](`(() => { const e = document.querySelector(`+string(q)+`); if (!e || e.hidden || !e.offsetParent) return false; e.click(); return true; })()`, chromedp.WithPollingInterval(20*time.Millisecond))
}

// TestJobPage: the dead job, reached from the list by its whole id: its
// arguments, its attempt with the error and code it failed with, its
// moves from the audit log, and the requeue the machine gives the admin,
// after which the page shows the job QUEUED with the new moves. A job
// with arguments, opened by its URL, shows them.
func TestJobPage(t *testing.T) {
	w, ctx := jobsPageSession(t)
	job, err := w.queue.Enqueue(context.Background(), lifecycle.ActorGateway, jobqueue.NewJob{JobType: lifecycle.JobBrief, AgentSlug: "agent-p",
		Payload: json.RawMessage(`{"to":"ada@example.com","subject":"Welcome"}`)})
	if err != nil {
		t.Fatal(err)
	}
	link := css(`#jobs-body a[data-testid="job-link"][href="#/jobs/` + w.dead + `"]`)
	do(t, ctx, "open the dead job from the list", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/jobs?status=DEAD"),
		chromedp.WaitVisible(link),
		chromedp.Click(link),
		chromedp.WaitVisible(css(`#job-status[data-status="DEAD"]`)),
		chromedp.WaitVisible(css(`#job-attempts-body tr[data-attempt="1"]`)),
	)
	got := get(t, ctx, "read the job page", chromedp.Evaluate[map[string]string](`(() => {
		const t = (sel) => { const el = document.querySelector(sel); return el ? el.textContent : ''; };
		return {
			hash: location.hash, id: t('#job-id'), listLink: '',
			outcome: document.querySelector('#job-attempts-body tr[data-attempt="1"]').dataset.outcome,
			error: t('#job-attempts-body tr[data-attempt="1"] [data-col="error"]'),
			duration: t('#job-attempts-body tr[data-attempt="1"] [data-col="duration"]'),
			moves: [...document.querySelectorAll('#job-timeline li')].map((li) => li.dataset.to).join(' '),
			payload: t('#job-payload'), output: t('#job-output'),
		};
	})()`))
	if got["hash"] != "#/jobs/"+w.dead || got["id"] != w.dead {
		t.Errorf("the page of %s shows hash %q, id %q (the whole id)", w.dead, got["hash"], got["id"])
	}
	if got["outcome"] != "FAILED" || !strings.Contains(got["error"], deadError) || !strings.Contains(got["error"], "PERMANENT") || got["duration"] == "running" {
		t.Errorf("attempt 1: outcome %q, error %q, duration %q", got["outcome"], got["error"], got["duration"])
	}
	if want := "PENDING QUEUED CONTEXT_ASSEMBLY NOTEBOOKLM_CALL RETRY_BACKOFF FAILED DEAD"; got["moves"] != want {
		t.Errorf("timeline %q, want %q", got["moves"], want)
	}
	if got["payload"] != "No payload." || got["output"] != "No result yet." {
		t.Errorf("payload %q, result %q", got["payload"], got["output"])
	}
	// The id is copied: to the clipboard where the browser lets the page,
	// else selected for Ctrl+C.
	do(t, ctx, "copy the id", 20*time.Second,
		chromedp.Click(css(`[data-testid="copy-id"]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('[data-testid="copy-id"]').textContent !== 'Copy'`, chromedp.WithPollingInterval(20*time.Millisecond)),
	)
	copied := get(t, ctx, "read what was copied", chromedp.Evaluate[[]string](`[document.querySelector('[data-testid="copy-id"]').textContent, getSelection().toString()]`))
	if !(copied[0] == "Copied" || copied[0] == "Selected: press Ctrl+C" && copied[1] == w.dead) {
		t.Errorf("after Copy the button says %q and %q is selected, want the id %s copied or selected", copied[0], copied[1], w.dead)
	}
	// The gateway is offered no requeue; the admin is, and it lands.
	if n := get(t, ctx, "count requeue buttons", chromedp.Evaluate[int](`document.querySelectorAll('#job-actions [data-testid="job-requeue"]').length`)); n != 0 {
		t.Errorf("%d requeue buttons for the gateway", n)
	}
	do(t, ctx, "requeue as admin", 20*time.Second, asAdmin(
		clickFresh(`#job-actions [data-testid="job-requeue"]`),
		chromedp.WaitVisible(css(`#job-status[data-status="QUEUED"]`)),
		chromedp.WaitVisible(css(`#job-timeline li[data-from="DEAD"][data-to="QUEUED"]`)),
	)...)

	// By URL: a job with arguments, shown as JSON.
	do(t, ctx, "open a job by its URL", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/jobs/"+job.JobID),
		chromedp.WaitVisible(css(`#job-status[data-status="QUEUED"]`)),
	)
	payload := get(t, ctx, "read the payload", chromedp.Text(css(`#job-payload`)))
	if !strings.Contains(payload, `"to": "ada@example.com"`) || !strings.Contains(payload, `"subject": "Welcome"`) {
		t.Errorf("payload shown %q", payload)
	}
	do(t, ctx, "open a job that is not there", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/jobs/job-none"),
		chromedp.WaitVisible(css(`#job-error[data-code="JOB_NOT_FOUND"]`)),
	)
}

// TestSearchByID: the header's search opens a job by its id, a run by
// its id, and says so when neither has the id.
func TestSearchByID(t *testing.T) {
	w, ctx := jobsPageSession(t)
	res, err := w.run.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "plain", Trigger: "manual"})
	if err != nil {
		t.Fatal(err)
	}
	search := func(id string, then ...chromedp.Action[chromedp.Void]) []chromedp.Action[chromedp.Void] {
		return append([]chromedp.Action[chromedp.Void]{
			chromedp.SetValue(css(`#search-id`), id),
			chromedp.Click(css(`[data-testid="search-go"]`)),
		}, then...)
	}
	do(t, ctx, "open the page", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/"),
		chromedp.WaitVisible(css(`#search-id`)),
	)
	do(t, ctx, "find the dead job", 20*time.Second, search(w.dead,
		chromedp.WaitVisible(css(`#job-status[data-status="DEAD"]`)),
	)...)
	if h := get(t, ctx, "read the hash", chromedp.Evaluate[string](`location.hash`)); h != "#/jobs/"+w.dead {
		t.Errorf("hash %q after finding the job", h)
	}
	do(t, ctx, "find the run", 20*time.Second, search(res.RunID,
		chromedp.WaitVisible(css(`#run-id`)),
	)...)
	if id := get(t, ctx, "read the run id", chromedp.Text(css(`#run-id`))); id != res.RunID {
		t.Errorf("the run page shows %q, want %q", id, res.RunID)
	}
	do(t, ctx, "find nothing", 20*time.Second, search("job-none",
		chromedp.Poll[chromedp.Void](`document.querySelector('#search-msg').textContent.includes('No job or run')`, chromedp.WithPollingInterval(50*time.Millisecond)),
	)...)
}

// TestQueuesPanel: each lane with its depth, the stand-alone job's type
// lane among them, and the lane whose job a worker took marked running
// with that job, without reloading the page.
func TestQueuesPanel(t *testing.T) {
	w, ctx := jobsPageSession(t)
	lane := func(agent, col string) string {
		return `#queues-body tr[data-lane="` + agent + `"] [data-col="` + col + `"]`
	}
	do(t, ctx, "open the jobs page", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/jobs"),
		chromedp.WaitVisible(css(lane("agent-a", "ready"))),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
		settled(),
	)
	depths := get(t, ctx, "read the depths", chromedp.Evaluate[map[string]string](`(() => {
		const t = (sel) => { const el = document.querySelector(sel); return el ? el.textContent : ''; };
		return { a: t('`+lane("agent-a", "ready")+`'), b: t('`+lane("agent-b", "ready")+`'), type: t('`+lane("_type.BRIEF", "ready")+`'), typeWaiting: t('`+lane("_type.BRIEF", "waiting")+`'),
			z: t('`+lane("agent-z", "ready")+`'), running: String(document.querySelectorAll('#queues-body tr[data-running="true"]').length) };
	})()`))
	// The stand-alone job is delayed an hour: waiting, not ready.
	if want := map[string]string{"a": "40", "b": "20", "type": "0", "typeWaiting": "1", "z": "0", "running": "0"}; fmt.Sprint(depths) != fmt.Sprint(want) {
		t.Errorf("depths %v, want %v", depths, want)
	}
	c, err := w.queue.Claim(context.Background(), "page-test")
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	running := c.Job()
	do(t, ctx, "see the lane run", 20*time.Second,
		chromedp.WaitVisible(css(`#queues-body tr[data-lane="`+running.AgentSlug+`"][data-running="true"] a[href="#/jobs/`+running.JobID+`"]`)),
	)
}

// TestBulkRequeue: the dead jobs' filter offers the admin a requeue of
// them all, which asks first; confirmed, it requeues them and the counts
// follow at once.
func TestBulkRequeue(t *testing.T) {
	w, ctx := jobsPageSession(t)
	do(t, ctx, "open the dead jobs", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/jobs?status=DEAD"),
		chromedp.WaitVisible(css(`#jobs-body tr[data-status="DEAD"]`)),
		settled(),
	)
	if hidden := get(t, ctx, "read the bulk button", chromedp.Evaluate[bool](`document.querySelector('[data-testid="bulk-requeue"]').hidden`)); !hidden {
		t.Error("the gateway is offered a bulk requeue")
	}
	do(t, ctx, "ask for the bulk requeue as admin", 20*time.Second, asAdmin(
		chromedp.WaitVisible(css(`[data-testid="bulk-requeue"]`)),
		chromedp.Click(css(`[data-testid="bulk-requeue"]`)),
		chromedp.WaitVisible(css(`[data-testid="bulk-confirm"]`)),
		chromedp.Click(css(`[data-testid="bulk-dismiss"]`)),
		chromedp.WaitNotVisible(css(`#bulk-ask`)),
	)...)
	j, err := w.queue.Get(context.Background(), lifecycle.ActorAdmin, w.dead)
	if err != nil || j.Status != lifecycle.JobDead {
		t.Fatalf("a dismissed bulk requeue moved the job: %s, %v", j.Status, err)
	}
	do(t, ctx, "confirm the bulk requeue", 20*time.Second,
		chromedp.Click(css(`[data-testid="bulk-requeue"]`)),
		chromedp.WaitVisible(css(`[data-testid="bulk-confirm"]`)),
		chromedp.Click(css(`[data-testid="bulk-confirm"]`)),
		chromedp.WaitVisible(css(`#jobs-result[data-count="1"]`)),
		chromedp.WaitNotPresent(css(`#jobs-body tr[data-status="DEAD"]`)),
		chromedp.WaitVisible(css(`[data-testid="quick-DEAD"][data-count="0"]`)),
	)
	if j, err := w.queue.Get(context.Background(), lifecycle.ActorAdmin, w.dead); err != nil || j.Status != lifecycle.JobQueued {
		t.Errorf("after the bulk requeue the job is %s (%v), want QUEUED", j.Status, err)
	}
}

// TestQueuesPanelPausesAQueue: the queues panel sums the lanes by queue
// with each queue's pause state; the admin (and only the admin) is offered
// Pause, after which the queue shows paused and the Worker starts none of
// its jobs, and Resume, after which it starts them again.
func TestQueuesPanelPausesAQueue(t *testing.T) {
	w, ctx := jobsPageSession(t)
	row := `#named-queues-body tr[data-queue="default"]`
	do(t, ctx, "open the jobs page", 20*time.Second,
		chromedp.Navigate(w.URL+"/ui/#/jobs"),
		chromedp.WaitVisible(css(row+`[data-paused="false"] [data-col="ready"]`)),
		settled(),
	)
	ready := get(t, ctx, "read the default queue's depth", chromedp.Evaluate[string](`document.querySelector('`+row+` [data-col="ready"]').textContent`))
	if ready != "60" { // agent-a's 40 and agent-b's 20; the stand-alone job waits, the dead one is in no lane
		t.Errorf("the default queue's ready %q, want 60", ready)
	}
	if hidden := get(t, ctx, "read the pause button", chromedp.Evaluate[bool](`document.querySelector('`+row+` [data-testid="pause-queue"]').hidden`)); !hidden {
		t.Error("the gateway is offered a queue's pause")
	}
	do(t, ctx, "pause the default queue as admin", 20*time.Second, asAdmin(
		clickFresh(row+` [data-testid="pause-queue"]`),
		chromedp.WaitVisible(css(row+`[data-paused="true"] [data-testid="resume-queue"]`)),
		chromedp.WaitVisible(css(`#jobs-result`)),
	)...)
	if c, err := w.queue.Claim(context.Background(), "page-test"); err != nil || c != nil {
		t.Fatalf("a claim while the page paused the queue: %v, %v", c, err)
	}
	do(t, ctx, "resume it", 20*time.Second,
		clickFresh(row+` [data-testid="resume-queue"]`),
		chromedp.WaitVisible(css(row+`[data-paused="false"] [data-testid="pause-queue"]`)),
	)
	c, err := w.queue.Claim(context.Background(), "page-test")
	if err != nil || c == nil {
		t.Fatalf("no claim after the page resumed the queue: %v, %v", c, err)
	}
	_ = c.Abandon(context.Background())
}
