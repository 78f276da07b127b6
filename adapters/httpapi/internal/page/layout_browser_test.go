package page_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// diagramGeometry is what diagramProblems measures on the page, in the
// page: each machine diagram's states against the box it is shown in, its
// edges sampled along their length against the states they do not join,
// and its self-loops' labels against their own loop.
const diagramGeometry = `(() => {
	const out = { diagrams: 0, edges: 0, loops: 0, minScale: Infinity, problems: [] };
	const inside = (p, b, pad) => p.x > b.x + pad && p.x < b.x + b.width - pad && p.y > b.y + pad && p.y < b.y + b.height - pad;
	for (const svg of document.querySelectorAll('svg[data-testid="machine"]')) {
		out.diagrams++;
		const name = svg.dataset.machine;
		// The box the diagram is seen in: its container's client area
		// (a container that scrolls shows only that much at a time).
		const box = svg.closest('.diagram') || svg.parentNode;
		const r = box.getBoundingClientRect();
		const seen = { left: r.left + box.clientLeft, top: r.top + box.clientTop };
		seen.right = seen.left + box.clientWidth;
		seen.bottom = seen.top + box.clientHeight;
		const states = new Map();
		for (const g of svg.querySelectorAll('.state')) {
			const rect = g.querySelector('rect.outer');
			states.set(g.dataset.state, rect.getBBox());
			const b = rect.getBoundingClientRect();
			if (b.left < seen.left - 0.5 || b.right > seen.right + 0.5 || b.top < seen.top - 0.5 || b.bottom > seen.bottom + 0.5) {
				out.problems.push(name + ': state ' + g.dataset.state + ' at ' + [b.left, b.top, b.right, b.bottom].map(Math.round) +
					' is outside the box seen ' + [seen.left, seen.top, seen.right, seen.bottom].map(Math.round));
			}
		}
		const vb = svg.viewBox.baseVal;
		if (vb && vb.width) out.minScale = Math.min(out.minScale, svg.getBoundingClientRect().width / vb.width);
		const labels = [...svg.querySelectorAll('.labels .transition')].map((g) => ({
			name: g.dataset.from + '->' + g.dataset.to + ' (' + g.dataset.event + ')', box: g.querySelector('text').getBBox() }));
		for (const g of svg.querySelectorAll('.transitions .transition')) {
			const path = g.querySelector('path');
			const from = g.dataset.from, to = g.dataset.to || svg.querySelector('.state.initial').dataset.state;
			const len = path.getTotalLength();
			const pts = [];
			for (let l = 0; l <= len; l += 1) pts.push(path.getPointAtLength(l));
			out.edges++;
			const edge = (from || 'start') + '->' + to + (g.dataset.event ? ' (' + g.dataset.event + ')' : '');
			for (const [st, b] of states) {
				if (st === from || st === to) continue;
				const hit = pts.find((p) => inside(p, b, 1));
				if (hit) out.problems.push(name + ': edge ' + edge + ' runs through state ' + st + ' at ' + Math.round(hit.x) + ',' + Math.round(hit.y));
			}
			for (const l of labels) {
				const hit = pts.find((p) => inside(p, l.box, 0));
				if (hit) out.problems.push(name + ': the label ' + l.name + ' is crossed by edge ' + edge + ' at ' + Math.round(hit.x) + ',' + Math.round(hit.y));
			}
			if (from && from === to) {
				out.loops++;
				const label = svg.querySelector('.labels .transition[data-from="' + from + '"][data-to="' + to + '"][data-event="' + g.dataset.event + '"] text');
				const lb = label.getBBox();
				const hit = pts.find((p) => inside(p, lb, -1));
				if (hit) out.problems.push(name + ': the label of ' + edge + ' is crossed by its own loop at ' + Math.round(hit.x) + ',' + Math.round(hit.y));
			}
		}
	}
	return out;
})()`

type geometry struct {
	Diagrams int      `json:"diagrams"`
	Edges    int      `json:"edges"`
	Loops    int      `json:"loops"`
	MinScale float64  `json:"minScale"`
	Problems []string `json:"problems"`
}

// diagramProblems measures every machine diagram on the page; it fails the
// test when there is none, or no self-loop among them (the checks would
// pass on nothing).
func diagramProblems(t *testing.T, ctx context.Context) geometry {
	t.Helper()
	g := get(t, ctx, "measure the diagrams", chromedp.Evaluate[geometry](diagramGeometry))
	if g.Diagrams == 0 || g.Edges == 0 || g.Loops == 0 {
		t.Fatalf("nothing to measure: %d diagrams, %d edges, %d self-loops", g.Diagrams, g.Edges, g.Loops)
	}
	t.Logf("%d diagrams, %d edges, %d self-loops; smallest scale %.2f", g.Diagrams, g.Edges, g.Loops, g.MinScale)
	return g
}

// minLabelScale is the least a diagram may be shrunk to fit: its move
// labels (11 px) stay at 9 px or more on screen.
const minLabelScale = 9.0 / 11

// At 1400 px every state of every machine is inside the box its diagram is
// shown in (before, the job machines' COMPLETE, FAILED and DEAD were
// scrolled out of it), at a scale whose labels stay readable; no edge runs
// through a state it does not join (approval-run's ran through
// waiting_external); and no self-loop crosses its own label (step_completed
// was struck through).
func TestMachineDiagramsFitAndKeepClear(t *testing.T) {
	w, ctx := jobsPageSession(t)
	// 520 px: a diagram shrinks no further than readable, and scrolls.
	for _, width := range []int64{1400, 800, 520} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			do(t, ctx, "open the machines page", 20*time.Second,
				chromedp.EmulateViewport(width, 900),
				chromedp.Navigate(w.URL+"/ui/#/machines"),
				chromedp.Reload(),
				chromedp.WaitVisible(css(`section[data-machine="approval-run"] svg[data-testid="machine"]`)),
				chromedp.WaitVisible(css(`section[data-machine="nlm-job"] svg[data-testid="machine"]`)),
			)
			t.Logf("rankdirs: %v", get(t, ctx, "read the orientations", chromedp.Evaluate[map[string]string](
				`Object.fromEntries([...document.querySelectorAll('svg[data-testid="machine"]')].map((s) => [s.dataset.machine, s.dataset.rankdir]))`)))
			g := diagramProblems(t, ctx)
			for _, p := range g.Problems {
				// Narrower, a diagram may scroll rather than shrink below
				// readable: only its edges and labels are held to the rule.
				if width == 1400 || !isFitProblem(p) {
					t.Error(p)
				}
			}
			if g.MinScale < minLabelScale {
				t.Errorf("a diagram is drawn at %.2f of its size: its labels are under 9 px", g.MinScale)
			}
		})
	}
	// Widened without a reload, the page lays its diagrams out again:
	// canonical-run, top to bottom at 520 px, is left to right at 1400.
	do(t, ctx, "widen the window back to 1400 px", 20*time.Second,
		chromedp.EmulateViewport(1400, 900),
		chromedp.WaitVisible(css(`svg[data-machine="canonical-run"][data-rankdir="LR"]`)),
	)
	for _, p := range diagramProblems(t, ctx).Problems {
		t.Errorf("after widening: %s", p)
	}
}

func isFitProblem(p string) bool { return strings.Contains(p, "outside the box") }

// pageOverflow lists, on the page shown, what is wider than the viewport
// and not inside a container that scrolls sideways, and whether the page
// itself scrolls sideways.
const pageOverflow = `(() => {
	const vw = document.documentElement.clientWidth, out = [];
	const scrolls = (el) => { const o = getComputedStyle(el).overflowX; return o === 'auto' || o === 'scroll'; };
	for (const el of document.querySelectorAll('table, svg[data-testid="machine"], .controls, .top, pre')) {
		const b = el.getBoundingClientRect();
		if (b.width === 0) continue;
		let holder = null;
		for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) if (scrolls(p)) { holder = p; break; }
		const name = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.dataset.machine ? '[' + el.dataset.machine + ']' : '');
		if (holder) {
			const hb = holder.getBoundingClientRect();
			if (hb.left < -0.5 || hb.right > vw + 0.5) out.push(name + "'s scroll box spans " + Math.round(hb.left) + '..' + Math.round(hb.right) + ' of ' + vw);
			// A table reflows to its box: a part scrolled out of sight is
			// a part a reader at this width does not know is there.
			if (el.tagName === 'TABLE' && b.width > holder.clientWidth + 1) out.push(name + ' is ' + Math.round(b.width) + ' px wide in a box of ' + holder.clientWidth + ': ' + Math.round(b.width - holder.clientWidth) + ' px out of sight');
		} else if (b.left < -0.5 || b.right > vw + 0.5) {
			out.push(name + ' spans ' + Math.round(b.left) + '..' + Math.round(b.right) + ' of ' + vw + ' and nothing scrolls it');
		}
	}
	for (const td of document.querySelectorAll('td')) {
		if (td.scrollWidth > td.clientWidth + 1 && getComputedStyle(td).textOverflow !== 'ellipsis') {
			out.push('a cell of ' + (td.closest('table').id || 'a table') + ' overflows it: ' + JSON.stringify(td.textContent.slice(0, 40)));
		}
	}
	if (document.documentElement.scrollWidth > vw + 1) out.push('the page is ' + document.documentElement.scrollWidth + ' px wide in a ' + vw + ' px viewport');
	return out;
})()`

// At 800 px the jobs page, a job's page, the machines page and the agents page keep every
// table and diagram within the viewport or inside a box that scrolls it
// sideways, every table fits that box and no cell's text runs out of its
// cell (before, the jobs counts hid RETRY_BACKOFF, FAILED and DEAD past the
// right edge, and the list hid its error column), and the page itself does
// not scroll sideways.
func TestPagesWorkAt800px(t *testing.T) {
	w, ctx := jobsPageSession(t)
	for _, c := range []struct{ name, hash, ready string }{
		{"jobs", "#/jobs", `#jobs-body tr`},
		{"dead jobs", "#/jobs?status=DEAD", `#jobs-body tr[data-status="DEAD"]`},
		{"machines", "#/machines", `section[data-machine="nlm-job"] svg[data-testid="machine"]`},
		{"agents", "#/", `section[data-agent="approval"]`},
		{"job", "#/jobs/" + w.dead, `#job-attempts-body tr[data-attempt="1"]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			do(t, ctx, "open the "+c.name+" page at 800 px", 20*time.Second,
				chromedp.EmulateViewport(800, 900),
				chromedp.Navigate(w.URL+"/ui/"+c.hash),
				chromedp.Reload(),
				chromedp.WaitVisible(css(c.ready)),
			)
			for _, p := range get(t, ctx, "measure the page", chromedp.Evaluate[[]string](pageOverflow)) {
				t.Error(p)
			}
		})
	}
}
