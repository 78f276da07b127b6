package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/bench/harness"
)

// The report: Markdown tables, ready for docs/performance.md. A row is a
// system inserting one way (its batch size and call); columns are the W.
// Every cell is the median over rounds followed by each round's figure in
// round order, so the spread is seen, not summarised.

// row is one system inserting one way.
type row struct {
	system string
	batch  int
	call   string
}

// table is one mode's results: row → W → rounds.
type table map[row]map[int][]harness.Result

func group(results []harness.Result, mode string) (table, []row, []int) {
	t := table{}
	var rows []row
	var ws []int
	for _, r := range results {
		if r.Mode != mode {
			continue
		}
		k := row{r.System, r.Batch, r.Insert}
		if t[k] == nil {
			t[k] = map[int][]harness.Result{}
			rows = append(rows, k)
		}
		t[k][r.Workers] = append(t[k][r.Workers], r)
		if !slices.Contains(ws, r.Workers) {
			ws = append(ws, r.Workers)
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(slices.Index(allSystems, a.system), slices.Index(allSystems, b.system)), cmp.Compare(a.batch, b.batch))
	})
	slices.Sort(ws)
	for _, byW := range t {
		for _, rs := range byW {
			slices.SortFunc(rs, func(a, b harness.Result) int { return cmp.Compare(a.Round, b.Round) })
		}
	}
	return t, rows, ws
}

// insertLabel says how a row inserts: "one at a time (Insert)" or
// "InsertMany ×100".
func insertLabel(batch int, call string) string {
	if batch <= 1 {
		return "one a call (" + call + ")"
	}
	return call + " ×" + strconv.Itoa(batch)
}

func header(w io.Writer, first string, ws []int) {
	fmt.Fprintf(w, "| %s | insert |", first)
	for _, x := range ws {
		fmt.Fprintf(w, " W=%d |", x)
	}
	fmt.Fprintf(w, "\n|---|---|%s\n", strings.Repeat("---|", len(ws)))
}

// cell is the median of f over rs and each round's value.
func cell(rs []harness.Result, f func(harness.Result) float64, format func(float64) string) string {
	if len(rs) == 0 {
		return "—"
	}
	xs := mapf(rs, f)
	each := make([]string, len(xs))
	for i, x := range xs {
		each[i] = format(x)
	}
	return format(median(xs)) + " (" + strings.Join(each, " · ") + ")"
}

func report(w io.Writer, results []harness.Result, rate float64) {
	tp, rows, ws := group(results, "throughput")
	if len(rows) > 0 {
		fmt.Fprintf(w, "\n### Throughput: end-to-end jobs/s, median (each round)\n\n")
		header(w, "system", ws)
		for _, k := range rows {
			fmt.Fprintf(w, "| %s | %s |", k.system, insertLabel(k.batch, k.call))
			for _, x := range ws {
				fmt.Fprintf(w, " %s |", cell(tp[k][x], func(r harness.Result) float64 { return r.JobsPerSec }, rateNum))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "\n### CPU per job, ms: process + server of the median round (each round's total)\n\n")
		header(w, "system", ws)
		for _, k := range rows {
			fmt.Fprintf(w, "| %s | %s |", k.system, insertLabel(k.batch, k.call))
			for _, x := range ws {
				fmt.Fprintf(w, " %s |", cpuCellRounds(tp[k][x]))
			}
			fmt.Fprintln(w)
		}
		costs(w, tp, rows, ws)
		ratios(w, tp, rows, ws, "end-to-end jobs/s, SDK ÷ peer (higher is better for the SDK)",
			func(r harness.Result) float64 { return r.JobsPerSec })
		ratios(w, tp, rows, ws, "CPU per job (process + server), SDK ÷ peer (lower is better for the SDK)",
			func(r harness.Result) float64 { return float64(r.CPUPerJob) })
	}
	floors(w, results, tp)
	lt, lrows, lws := group(results, "latency")
	if len(lrows) > 0 {
		fmt.Fprintf(w, "\n### Enqueue→start from a separate process at %.0f jobs/s, one job a call: p50 / p99 ms, median (each round)\n\n", rate)
		header(w, "system", lws)
		for _, k := range lrows {
			fmt.Fprintf(w, "| %s | %s |", k.system, insertLabel(k.batch, k.call))
			for _, x := range lws {
				rs := lt[k][x]
				p50 := cell(rs, func(r harness.Result) float64 { return float64(r.P50) / 1e6 }, num)
				p99 := cell(rs, func(r harness.Result) float64 { return float64(r.P99) / 1e6 }, num)
				fmt.Fprintf(w, " %s / %s%s |", p50, p99, backlog(rs, rate))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, "\n(backlog: the system ran the jobs slower than they came, so the latency is mostly queueing.)")
		ratios(w, lt, lrows, lws, "p50 enqueue→start, SDK ÷ peer (lower is better for the SDK)",
			func(r harness.Result) float64 { return float64(r.P50) })
		ratios(w, lt, lrows, lws, "p99 enqueue→start, SDK ÷ peer (lower is better for the SDK)",
			func(r harness.Result) float64 { return float64(r.P99) })
	}
}

// backlog marks a latency cell whose system could not keep up with the
// offered rate (its median measurement took over 1.5 times the offering's
// duration), saying the rate it ran at: its latency is a queue's wait,
// not a pickup's (River's defaults at W = 1 run at most 10 jobs/s).
func backlog(rs []harness.Result, rate float64) string {
	if len(rs) == 0 || rate <= 0 {
		return ""
	}
	el := median(mapf(rs, func(r harness.Result) float64 { return r.Elapsed.Seconds() }))
	if el <= 1.5*float64(rs[0].Jobs)/rate {
		return ""
	}
	return fmt.Sprintf(" (backlog: %.0f jobs/s)", float64(rs[0].Jobs)/el)
}

// costs prints each row's counts per job at each W (medians of rounds).
func costs(w io.Writer, tp table, rows []row, ws []int) {
	fmt.Fprintf(w, "\n### Costs per job (medians of rounds)\n\n")
	fmt.Fprintln(w, "| system | insert | W | jobs | durable writes/job | reads/job | lists/job | other per job |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, k := range rows {
		for _, x := range ws {
			rs := tp[k][x]
			if len(rs) == 0 {
				continue
			}
			med := func(f func(harness.Result) float64) string { return num(median(mapf(rs, f))) }
			keys := make([]string, 0, len(rs[0].Cost.Extra))
			for e := range rs[0].Cost.Extra {
				keys = append(keys, e)
			}
			sort.Strings(keys)
			var extra []string
			for _, e := range keys {
				extra = append(extra, e+" "+med(func(r harness.Result) float64 { return r.PerJob(r.Cost.Extra[e]) }))
			}
			fmt.Fprintf(w, "| %s | %s | %d | %d | %s %s | %s | %s | %s |\n", k.system, insertLabel(k.batch, k.call), x, rs[0].Jobs,
				med(func(r harness.Result) float64 { return r.PerJob(r.Cost.Writes) }), rs[0].WritesUnit,
				med(func(r harness.Result) float64 { return r.PerJob(r.Cost.Reads) }),
				med(func(r harness.Result) float64 { return r.PerJob(r.Cost.Lists) }), strings.Join(extra, ", "))
		}
	}
}

// ratios prints, for each SDK row and each peer row inserting with the same
// batch size, at each W, the median over rounds of the ratio within a
// round: both numbers from the same minutes of the machine, so load from
// others cancels out better than in a ratio of medians.
func ratios(w io.Writer, t table, rows []row, ws []int, what string, f func(harness.Result) float64) {
	type pair struct{ sdk, peer row }
	var pairs []pair
	for _, s := range rows {
		for _, p := range rows {
			if !peers[s.system] && peers[p.system] && s.batch == p.batch {
				pairs = append(pairs, pair{s, p})
			}
		}
	}
	if len(pairs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nSame-round ratios, %s, both inserting alike: median (each round):\n\n", what)
	header(w, "SDK ÷ peer", ws)
	for _, pr := range pairs {
		how := "one a call"
		if pr.sdk.batch > 1 {
			how = "×" + strconv.Itoa(pr.sdk.batch)
		}
		fmt.Fprintf(w, "| %s ÷ %s | %s: %s vs %s |", pr.sdk.system, pr.peer.system, how, pr.sdk.call, pr.peer.call)
		for _, x := range ws {
			var xs []float64
			for _, a := range t[pr.sdk][x] {
				for _, b := range t[pr.peer][x] {
					if a.Round == b.Round && f(a) >= 0 && f(b) > 0 {
						xs = append(xs, f(a)/f(b))
					}
				}
			}
			c := "—"
			if len(xs) > 0 {
				each := make([]string, len(xs))
				for i, v := range xs {
					each[i] = fmt.Sprintf("%.3g", v)
				}
				c = fmt.Sprintf("%.3g (%s)", median(xs), strings.Join(each, " · "))
			}
			fmt.Fprintf(w, " %s |", c)
		}
		fmt.Fprintln(w)
	}
}

// floors prints the SDK stores' raw write rate beside the most jobs per
// second it allows, against the one-at-a-time rows at the largest W.
func floors(w io.Writer, results []harness.Result, tp table) {
	byName := map[string][]harness.Result{}
	var names []string
	for _, r := range results {
		if r.Mode == "floor" {
			if byName[r.System] == nil {
				names = append(names, r.System)
			}
			byName[r.System] = append(byName[r.System], r)
		}
	}
	if len(names) == 0 {
		return
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(slices.Index(allSystems, a), slices.Index(allSystems, b)) })
	fmt.Fprintln(w, "\n### The stores' floor: raw create-only 512-byte puts, 16 goroutines, same rounds")
	fmt.Fprint(w, "\nceiling = raw puts/s ÷ the job's writes; share = measured jobs/s ÷ ceiling, median of same-round ratios;"+
		" against the one-a-call row at the largest W.\n\n")
	fmt.Fprintln(w, "| store | raw puts/s | W | writes/job | ceiling jobs/s | measured jobs/s | share of ceiling |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, n := range names {
		rs := byName[n]
		puts := median(mapf(rs, func(r harness.Result) float64 { return r.JobsPerSec }))
		var tps []harness.Result
		wmax := 0
		for k, byW := range tp {
			if k.system != n || k.batch != 1 {
				continue
			}
			for x, t := range byW {
				if x > wmax {
					wmax, tps = x, t
				}
			}
		}
		if len(tps) == 0 {
			fmt.Fprintf(w, "| %s | %.0f | | | | | |\n", n, puts)
			continue
		}
		wpj := median(mapf(tps, func(r harness.Result) float64 { return r.PerJob(r.Cost.Writes) }))
		jps := median(mapf(tps, func(r harness.Result) float64 { return r.JobsPerSec }))
		var share []float64
		for _, f := range rs {
			for _, t := range tps {
				if f.Round == t.Round && f.JobsPerSec > 0 {
					share = append(share, t.JobsPerSec/(f.JobsPerSec/t.PerJob(t.Cost.Writes)))
				}
			}
		}
		fmt.Fprintf(w, "| %s | %.0f | %d | %s | %.0f | %.0f | %.2f |\n", n, puts, wmax, num(wpj), puts/wpj, jps, median(share))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

func costLine(r harness.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "writes/job %s (%s)", num(r.PerJob(r.Cost.Writes)), r.WritesUnit)
	if r.Cost.Reads >= 0 {
		fmt.Fprintf(&b, " reads/job %s", num(r.PerJob(r.Cost.Reads)))
	}
	if r.Cost.Lists >= 0 {
		fmt.Fprintf(&b, " lists/job %s", num(r.PerJob(r.Cost.Lists)))
	}
	keys := make([]string, 0, len(r.Cost.Extra))
	for k := range r.Cost.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s/job %s", k, num(r.PerJob(r.Cost.Extra[k])))
	}
	return b.String()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// perJob is d per job in milliseconds, or -1 when d is unknown (< 0).
func perJob(r harness.Result, d time.Duration) float64 {
	if d < 0 || r.Jobs == 0 {
		return -1
	}
	return float64(d) / 1e6 / float64(r.Jobs)
}

// cpuCell shows CPU per job as "total (process + server)" in ms, "n/a"
// for an unknown part.
func cpuCell(total time.Duration, process, server float64) string {
	t := -1.0
	if total >= 0 {
		t = float64(total) / 1e6
	}
	return fmt.Sprintf("%s (%s + %s)", num(t), num(process), num(server))
}

// cpuCellRounds is the cell of the median round by CPU per job (with an
// even number of rounds, the mean of the middle two, part by part, so the
// parts still add up to the total shown), then each round's total. Rounds
// whose server CPU is unknown are left out of the median; when every
// round's is, the cell shows the process's median and the total as n/a.
func cpuCellRounds(rs []harness.Result) string {
	if len(rs) == 0 {
		return "—"
	}
	each := make([]string, len(rs))
	for i, r := range rs {
		each[i] = num(float64(r.CPUPerJob) / 1e6)
		if r.CPUPerJob < 0 {
			each[i] = "n/a"
		}
	}
	tail := "; " + strings.Join(each, " · ")
	known := slices.DeleteFunc(slices.Clone(rs), func(r harness.Result) bool { return r.CPUPerJob < 0 })
	if len(known) == 0 {
		return cpuCell(-1, median(mapf(rs, func(r harness.Result) float64 { return perJob(r, r.CPUProcess) })), -1) + tail
	}
	slices.SortFunc(known, func(a, b harness.Result) int { return cmp.Compare(a.CPUPerJob, b.CPUPerJob) })
	mid := known[(len(known)-1)/2 : len(known)/2+1]
	var total, proc, srv float64
	for _, r := range mid {
		proc += perJob(r, r.CPUProcess) / float64(len(mid))
		srv += perJob(r, r.CPUServer) / float64(len(mid))
		total += float64(r.CPUPerJob) / float64(len(mid))
	}
	return cpuCell(time.Duration(total), proc, srv) + tail
}

func mapf(rs []harness.Result, f func(harness.Result) float64) []float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return xs
}

func num(x float64) string {
	switch {
	case x < 0:
		return "n/a"
	case x < 10:
		return fmt.Sprintf("%.3g", x)
	default:
		return fmt.Sprintf("%.1f", x)
	}
}

// rateNum is a rate in whole units with thousands separated: 2,866.
func rateNum(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
