package page_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

const emailType lifecycle.JobType = "SEND_EMAIL"

// activityWorker is a Worker of one user type, SEND_EMAIL, whose jobs
// have run: okJobs completed (each ran about 30 ms), badJobs failed for
// good (DEAD), and waitJobs wait QUEUED; served with the page and the
// event feed.
type activityWorker struct {
	URL   string
	queue *jobqueue.Queue
}

const (
	okJobs   = 6
	badJobs  = 3
	waitJobs = 4
)

func startActivityWorker(t *testing.T) *activityWorker {
	t.Helper()
	return serveActivity(t, clock.Real(), func(context.Context) {}, func(q *jobqueue.Queue) {
		ctx := context.Background()
		for i := range okJobs + badJobs {
			id := fmt.Sprintf("ok-%d", i)
			if i >= okJobs {
				id = fmt.Sprintf("bad-%d", i)
			}
			if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: id, JobType: emailType, AgentSlug: fmt.Sprintf("m-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		for range okJobs + badJobs {
			c, err := q.Claim(ctx, "page-test")
			if err != nil || c == nil {
				t.Fatalf("claim: %v, %v", c, err)
			}
			if _, err := c.Run(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		for i := range waitJobs {
			if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("wait-%d", i), JobType: emailType, AgentSlug: "later"}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// serveActivity serves a Worker of SEND_EMAIL jobs on clk: each runs
// work (30 ms by default), and fails for good when its id starts with
// "bad"; fill makes its jobs before it is served.
func serveActivity(t *testing.T, clk clock.Clock, work func(context.Context), fill func(q *jobqueue.Queue)) *activityWorker {
	t.Helper()
	store := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := jobqueue.New(jobqueue.Config{Store: store, Logger: quiet, Clock: clk, Types: map[lifecycle.JobType]jobqueue.TypeConfig{
		emailType: {Handler: jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
			time.Sleep(30 * time.Millisecond)
			work(ctx)
			if strings.HasPrefix(j.JobID, "bad") {
				return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("no such address"))
			}
			return lifecycle.JobOutput{Content: []byte(`{"sent":true}`)}, nil
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	fill(q)
	noop := []run.Step{{Name: "noop", Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet}, run.Agent{Slug: "plain", Steps: noop})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: runner, Queue: q, Store: store, Events: true, EventPollInterval: 50 * time.Millisecond, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := serveWorker(api)
	s.spawn(api.Run)
	t.Cleanup(func() { s.stop(t) })
	return &activityWorker{URL: s.URL, queue: q}
}

// chartGeometry measures the charts: per chart its values added up by
// series, the bars whose height is not their value's share of the plot,
// what lies outside its figure or the viewport, and tick labels that
// overlap.
const chartGeometry = `(() => {
	const vw = document.documentElement.clientWidth, out = { sums: {}, problems: [], charts: 0 };
	const inside = (b, box) => b.left >= box.left - 0.5 && b.right <= box.right + 0.5 && b.top >= box.top - 0.5 && b.bottom <= box.bottom + 0.5;
	for (const fig of document.querySelectorAll('#charts figure[data-chart]')) {
		const id = fig.dataset.chart, svg = fig.querySelector('svg');
		if (!svg) { out.problems.push(id + ' has no chart'); continue; }
		out.charts++;
		const fb = fig.getBoundingClientRect(), sb = svg.getBoundingClientRect();
		if (!inside(sb, fb)) out.problems.push(id + "'s chart spans " + Math.round(sb.left) + '..' + Math.round(sb.right) + ' outside its box ' + Math.round(fb.left) + '..' + Math.round(fb.right));
		if (fb.left < -0.5 || fb.right > vw + 0.5) out.problems.push(id + "'s box spans " + Math.round(fb.left) + '..' + Math.round(fb.right) + ' of ' + vw);
		for (const k of fig.querySelectorAll('figcaption span')) {
			if (!inside(k.getBoundingClientRect(), fb)) out.problems.push(id + "'s legend " + k.textContent + ' is outside its box');
		}
		const max = Number(svg.dataset.max), axis = svg.querySelector('line.axis'), grid = svg.querySelector('line.grid');
		const plot = axis.getBoundingClientRect().top - grid.getBoundingClientRect().top;
		const stacked = {};
		for (const el of svg.querySelectorAll('[data-key]')) {
			const v = Number(el.dataset.value), key = el.dataset.key;
			out.sums[id + '.' + key] = (out.sums[id + '.' + key] || 0) + v;
			const b = el.getBoundingClientRect();
			if (!inside(b, sb)) out.problems.push(id + ' ' + key + ' at minute ' + el.dataset.minute + ' is outside the chart');
			if (el.tagName === 'rect') {
				const m = el.dataset.minute;
				stacked[m] = (stacked[m] || 0) + v;
				if (Math.abs(b.height - v / max * plot) > 0.75) out.problems.push(id + ' bar ' + key + '=' + v + ' is ' + b.height.toFixed(1) + ' px high, want ' + (v / max * plot).toFixed(1));
				if (Math.abs(axis.getBoundingClientRect().top - stacked[m] / max * plot - b.top) > 0.75) out.problems.push(id + ' bar ' + key + ' at minute ' + m + ' does not sit on the bars below it');
			}
		}
		const ticks = [...svg.querySelectorAll('text.tick')].map((t) => [t.textContent, t.getBoundingClientRect()]);
		for (let i = 0; i < ticks.length; i++) for (let j = i + 1; j < ticks.length; j++) {
			const a = ticks[i][1], b = ticks[j][1];
			if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) out.problems.push(id + ': ticks ' + ticks[i][0] + ' and ' + ticks[j][0] + ' overlap');
		}
		for (const [text, b] of ticks) if (!inside(b, sb)) out.problems.push(id + ': tick ' + text + ' is outside the chart');
	}
	return out;
})()`

type geometryOfCharts struct {
	Sums     map[string]float64 `json:"sums"`
	Problems []string           `json:"problems"`
	Charts   int                `json:"charts"`
}

// TestJobsPageCharts: the jobs page draws the last hour's throughput,
// failures and latency from GET /stats/jobs/activity: the bars add up to
// the jobs that completed and the attempts that failed, each bar's height
// is its value's share of the plot and stacks on the one below, the run
// time has its points, and every chart, legend and tick stays in its box
// at 1400 and at 800 px. A bulk cancel of the QUEUED jobs, asked for and
// confirmed, ends them CANCELLED, and the counts and the failures chart
// show it at once.
func TestJobsPageCharts(t *testing.T) {
	bin := chromium(t)
	w := startActivityWorker(t)
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(3*time.Minute, closeBrowser)
	defer overall.Stop()

	measure := func(width int) geometryOfCharts {
		t.Helper()
		do(t, ctx, fmt.Sprintf("open the jobs page at %d px", width), 30*time.Second,
			chromedp.EmulateViewport(int64(width), 900),
			chromedp.Navigate(w.URL+"/ui/#/jobs"),
			chromedp.Reload(),
			chromedp.WaitVisible(css(`#charts svg[data-chart="throughput"] rect.bar`)),
			chromedp.WaitVisible(css(`#charts svg[data-chart="latency"] circle.point`)),
		)
		g := get(t, ctx, "measure the charts", chromedp.Evaluate[geometryOfCharts](chartGeometry))
		if g.Charts != 3 {
			t.Errorf("at %d px: %d charts, want 3", width, g.Charts)
		}
		for _, p := range g.Problems {
			t.Errorf("at %d px: %s", width, p)
		}
		return g
	}
	for _, width := range []int{1400, 800} {
		g := measure(width)
		if g.Sums["throughput.completed"] != okJobs || g.Sums["failures.failed"] != badJobs || g.Sums["latency.run_p50_ms"] == 0 {
			t.Errorf("at %d px the charts add up to %v, want %d completed, %d failed and run times", width, g.Sums, okJobs, badJobs)
		}
	}

	do(t, ctx, "cancel the QUEUED jobs as admin", 30*time.Second,
		chromedp.EmulateViewport(1400, 900),
		chromedp.Navigate(w.URL+"/ui/#/jobs?status=QUEUED"),
		chromedp.Reload(),
		chromedp.WaitVisible(css(`#jobs-body tr[data-status="QUEUED"]`)),
		chromedp.SetValue(css(`#actor`), "admin"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#actor").dispatchEvent(new Event("change"))`),
		chromedp.WaitVisible(css(`[data-testid="bulk-cancel"]`)),
		chromedp.Click(css(`[data-testid="bulk-cancel"]`)),
		chromedp.WaitVisible(css(`[data-testid="bulk-confirm"][data-action="cancel"]`)),
		chromedp.Click(css(`[data-testid="bulk-confirm"]`)),
		chromedp.WaitVisible(css(fmt.Sprintf(`#jobs-result[data-count="%d"]`, waitJobs))),
		chromedp.WaitNotPresent(css(`#jobs-body tr[data-status="QUEUED"]`)),
		chromedp.WaitVisible(css(fmt.Sprintf(`#job-counts tr.total td[data-state="CANCELLED"] a[data-count="%d"]`, waitJobs))),
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`[...document.querySelectorAll('#charts svg[data-chart="failures"] rect[data-key="cancelled"]')]
			.reduce((n, r) => n + Number(r.dataset.value), 0) === %d`, waitJobs), chromedp.WithPollingInterval(50*time.Millisecond)),
	)
	for i := range waitJobs {
		if j, err := w.queue.Get(context.Background(), lifecycle.ActorAdmin, fmt.Sprintf("wait-%d", i)); err != nil || j.Status != lifecycle.JobCancelled {
			t.Errorf("wait-%d after the bulk cancel: %s, %v", i, j.Status, err)
		}
	}
	if hidden := get(t, ctx, "read the bulk requeue button", chromedp.Evaluate[bool](`document.querySelector('[data-testid="bulk-requeue"]').hidden`)); !hidden {
		t.Error("a bulk requeue is offered for QUEUED jobs")
	}
	for _, p := range measure(1400).Problems {
		t.Error(p)
	}
}

// startBusyHour serves a Worker whose last hour was busy, on a fake clock
// set an hour back and moved on minute by minute: each minute a few
// jobs wait their turn and run for a while (their handler moves the
// clock), some fail for good; at the end the clock is at the present.
func startBusyHour(t *testing.T) *activityWorker {
	t.Helper()
	now := time.Now().UTC()
	clk := clock.NewFake(now.Add(-time.Hour))
	var runFor time.Duration
	return serveActivity(t, clk, func(context.Context) { clk.Advance(runFor) }, func(q *jobqueue.Queue) {
		ctx := context.Background()
		n := 0
		for m := range 60 {
			start := now.Add(time.Duration(m-60) * time.Minute)
			if d := start.Sub(clk.Now()); d > 0 {
				clk.Advance(d)
			}
			jobs := 4 + (m*7)%9 + m/6
			for i := range jobs {
				id := fmt.Sprintf("ok-%04d", n)
				if (n*5)%17 == 0 || m > 40 && m < 46 && i%3 == 0 {
					id = fmt.Sprintf("bad-%04d", n)
				}
				n++
				if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: id, JobType: emailType, AgentSlug: fmt.Sprintf("m-%d", n%5)}); err != nil {
					t.Fatal(err)
				}
				clk.Advance(time.Duration(50+(n*37)%400) * time.Millisecond) // its wait
				c, err := q.Claim(ctx, "page-test")
				if err != nil || c == nil {
					t.Fatalf("claim: %v, %v", c, err)
				}
				runFor = time.Duration(200+(n*131)%(1500+m*40)) * time.Millisecond
				if _, err := c.Run(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		if d := time.Now().UTC().Sub(clk.Now()); d > 0 {
			clk.Advance(d)
		}
		for i := range waitJobs {
			if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("wait-%d", i), JobType: emailType, AgentSlug: "later"}); err != nil {
				t.Fatal(err)
			}
		}
	})
}
