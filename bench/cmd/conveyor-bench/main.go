// Command conveyor-bench runs the same no-op job workload through this SDK
// (memstore, filestore, MinIO) and its peers (River on Postgres, asynq on
// Redis), interleaved over several rounds, and prints medians, the SDK/peer
// ratios of the same round, and each system's writes, reads and lists per
// job. scripts/bench.sh starts the servers and runs it; see
// docs/performance.md.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/bench/harness"
)

// main stays one function (about 175 lines, a third of them flags): the
// drivers it opens are closed, and MinIO stopped, by its own defers, and
// the rounds read as the measurement protocol (rotation, then each mode in
// turn) in one place; bench is a tool outside the SDK.
func main() {
	// The latency mode re-executes this binary as its enqueuing process.
	harness.MaybeChild()

	modes := flag.String("modes", "throughput,latency,floor", "what to measure: throughput, latency, floor (the SDK stores' raw write rate)")
	systems := flag.String("systems", "all", "comma-separated systems, or all: "+strings.Join(allSystems, ","))
	latSystems := flag.String("latency-systems", "sdk-filestore,river,river-tuned,asynq",
		"systems measured in latency mode (memstore cannot be reached from another process; sdk-minio may be added)")
	rounds := flag.Int("rounds", 3, "interleaved rounds; medians are over rounds")
	jobs := flag.Int("jobs", 2000, "jobs per throughput measurement (memstore, River, asynq)")
	jobsFile := flag.Int("jobs-filestore", 2000, "jobs per throughput measurement on filestore")
	jobsMinIO := flag.Int("jobs-minio", 300, "jobs per throughput measurement on MinIO")
	agents := flag.Int("agents", 256, "agents (queue keys) the jobs are spread over")
	slots := flag.Int("slots", 100, "worker slots")
	enqueuers := flag.Int("enqueuers", 16, "concurrent enqueuing goroutines (throughput mode)")
	floorWrites := flag.Int("floor-writes", 2000, "raw writes per floor measurement (memstore: 10x, MinIO: 1/4)")
	floorWorkers := flag.Int("floor-workers", 16, "goroutines making the raw writes of the floor")
	rate := flag.Float64("rate", 100, "jobs per second from the separate enqueuing process (latency mode)")
	latJobs := flag.Int("latency-jobs", 500, "jobs per latency measurement")
	pg := flag.String("pg", os.Getenv("BENCH_PG_DSN"), "Postgres DSN for River (empty: River skipped)")
	pgData := flag.String("pg-data", os.Getenv("BENCH_PG_DATA"),
		"that Postgres's data directory, on this machine: its postmaster.pid names the server whose CPU (the postmaster and all its processes) counts in River's CPU per job (empty: unknown)")
	redisAddr := flag.String("redis", os.Getenv("BENCH_REDIS_ADDR"), "Redis host:port for asynq (empty: asynq skipped)")
	minioBin := flag.String("minio", "auto", "MinIO server binary, auto to look for it, or none")
	dir := flag.String("dir", os.TempDir(), "where filestore and MinIO keep their data: a directory on the disk to measure, not tmpfs")
	out := flag.String("json", "", "also write every measurement to this file as JSON")
	flag.Parse()
	log.SetFlags(0)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()

	want := map[string]bool{}
	for _, s := range strings.Split(*systems, ",") {
		if s == "all" {
			for _, a := range allSystems {
				want[a] = true
			}
		} else if s != "" {
			want[s] = true
		}
	}
	var drivers []harness.Driver
	defer func() {
		for _, d := range drivers {
			d.Close()
		}
	}()
	add := func(d harness.Driver) { drivers = append(drivers, d) }
	if want[harness.NameMemstore] {
		add(harness.NewMemstore())
	}
	if want[harness.NameFilestore] {
		add(harness.NewFilestore(*dir))
	}
	if want[harness.NameMinIO] {
		bin := *minioBin
		if bin == "auto" {
			b, err := harness.MinIOBinary()
			if err != nil {
				log.Printf("skipping %s: %v", harness.NameMinIO, err)
			}
			bin = b
		}
		if bin != "" && bin != "none" {
			m, err := harness.StartMinIO(ctx, bin, *dir)
			if err != nil {
				log.Fatalf("starting MinIO: %v", err)
			}
			defer m.Stop()
			add(harness.NewMinIO(m))
		}
	}
	for _, name := range []string{harness.NameRiver, harness.NameRiverTuned} {
		if !want[name] {
			continue
		}
		if *pg == "" {
			log.Printf("skipping %s: no -pg DSN", name)
			continue
		}
		d, err := harness.NewRiver(ctx, name, *pg, *pgData)
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		if _, err := d.ServerCPU(ctx); err != nil {
			log.Printf("%s: its CPU per job will be n/a: %v", name, err)
		}
		add(d)
	}
	if want[harness.NameAsynq] {
		if *redisAddr == "" {
			log.Printf("skipping %s: no -redis address", harness.NameAsynq)
		} else {
			d, err := harness.OpenAsynq(ctx, *redisAddr)
			if err != nil {
				log.Fatalf("asynq: %v", err)
			}
			add(d)
		}
	}
	if len(drivers) == 0 {
		log.Fatal("no system to measure")
	}
	latWant := map[string]bool{}
	for _, s := range strings.Split(*latSystems, ",") {
		latWant[s] = true
	}

	fmt.Printf("conveyor-bench: %s, GOMAXPROCS %d, %d rounds, %d slots, %d agents\n",
		runtime.Version(), runtime.GOMAXPROCS(0), *rounds, *slots, *agents)
	var results []harness.Result
	for r := range *rounds {
		// Each round starts with a different system, so none is always
		// measured first (on a cold cache) or last (after the others'
		// background work, e.g. Postgres's checkpoints).
		order := slices.Clone(drivers)
		rot := r % len(order)
		order = append(order[rot:], order[:rot]...)
		if strings.Contains(*modes, "throughput") {
			for _, d := range order {
				n := *jobs
				switch d.Name() {
				case harness.NameFilestore:
					n = *jobsFile
				case harness.NameMinIO:
					n = *jobsMinIO
				}
				res, err := harness.Throughput(ctx, d, harness.ThroughputConfig{Jobs: n, Agents: *agents, Slots: *slots, Enqueuers: *enqueuers})
				if err != nil {
					log.Fatalf("round %d: %v", r+1, err)
				}
				res.Round = r + 1
				results = append(results, res)
				log.Printf("round %d throughput %-14s %6d jobs %8.1f jobs/s  cpu/job %s ms  %s", r+1, d.Name(), n, res.JobsPerSec,
					cpuCell(res.CPUPerJob, perJob(res, res.CPUProcess), perJob(res, res.CPUServer)), costLine(res))
				if res.CPUError != "" {
					log.Printf("round %d throughput %-14s server CPU unknown: %s", r+1, d.Name(), res.CPUError)
				}
			}
		}
		if strings.Contains(*modes, "floor") {
			for _, d := range order {
				if _, ok := d.(harness.Floorer); !ok {
					continue
				}
				n := *floorWrites
				switch d.Name() {
				case harness.NameMemstore:
					n *= 10
				case harness.NameMinIO:
					n /= 4
				}
				res, err := harness.Floor(ctx, d, n, *floorWorkers)
				if err != nil {
					log.Fatalf("round %d: %v", r+1, err)
				}
				res.Round = r + 1
				results = append(results, res)
				log.Printf("round %d floor      %-14s %6d raw create-only puts %8.0f puts/s", r+1, d.Name(), n, res.JobsPerSec)
			}
		}
		if strings.Contains(*modes, "latency") {
			for _, d := range order {
				if !latWant[d.Name()] || d.Name() == harness.NameMemstore {
					continue
				}
				res, err := harness.Latency(ctx, d, harness.LatencyConfig{Jobs: *latJobs, Rate: *rate, Slots: *slots, Agents: *agents})
				if err != nil {
					log.Fatalf("round %d: %v", r+1, err)
				}
				res.Round = r + 1
				results = append(results, res)
				log.Printf("round %d latency    %-14s %6d jobs at %.0f/s  p50 %s  p99 %s  max %s", r+1, d.Name(), res.Jobs, *rate,
					ms(res.P50), ms(res.P99), ms(res.Max))
			}
		}
	}
	report(os.Stdout, results, *rate)
	if *out != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

var allSystems = []string{harness.NameMemstore, harness.NameFilestore, harness.NameMinIO,
	harness.NameRiver, harness.NameRiverTuned, harness.NameAsynq}

var peers = map[string]bool{harness.NameRiver: true, harness.NameRiverTuned: true, harness.NameAsynq: true}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

func costLine(r harness.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "writes/job %s (%s)", per(r, r.Cost.Writes), r.WritesUnit)
	if r.Cost.Reads >= 0 {
		fmt.Fprintf(&b, " reads/job %s", per(r, r.Cost.Reads))
	}
	if r.Cost.Lists >= 0 {
		fmt.Fprintf(&b, " lists/job %s", per(r, r.Cost.Lists))
	}
	keys := make([]string, 0, len(r.Cost.Extra))
	for k := range r.Cost.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s/job %s", k, per(r, r.Cost.Extra[k]))
	}
	return b.String()
}

func per(r harness.Result, v int64) string {
	x := r.PerJob(v)
	if x < 0 {
		return "n/a"
	}
	if x < 10 {
		return fmt.Sprintf("%.3g", x)
	}
	return fmt.Sprintf("%.1f", x)
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

// report prints the tables as Markdown, ready for docs/performance.md. It
// stays one function (about 100 lines): it is the report's layout, table
// after table in print order.
func report(w io.Writer, results []harness.Result, rate float64) {
	by := map[string]map[string][]harness.Result{} // mode → system → rounds
	var names []string
	for _, r := range results {
		if by[r.Mode] == nil {
			by[r.Mode] = map[string][]harness.Result{}
		}
		if !slices.Contains(names, r.System) {
			names = append(names, r.System)
		}
		by[r.Mode][r.System] = append(by[r.Mode][r.System], r)
	}
	slices.SortStableFunc(names, func(a, b string) int {
		return slices.Index(allSystems, a) - slices.Index(allSystems, b)
	})
	medOf := func(rs []harness.Result, f func(harness.Result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	if tp := by["throughput"]; len(tp) > 0 {
		fmt.Fprintf(w, "\n### Throughput (medians of %d rounds)\n\n", len(tp[names[0]]))
		fmt.Fprintln(w, "| system | jobs | end-to-end jobs/s (median; min–max) | CPU/job, ms: process + server | durable writes/job | reads/job | lists/job | other per job |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
		for _, n := range names {
			rs := tp[n]
			if len(rs) == 0 {
				continue
			}
			rates := make([]float64, len(rs))
			for i, r := range rs {
				rates[i] = r.JobsPerSec
			}
			mid := medOf(rs, func(r harness.Result) float64 { return r.PerJob(r.Cost.Writes) })
			rd := medOf(rs, func(r harness.Result) float64 { return r.PerJob(r.Cost.Reads) })
			ls := medOf(rs, func(r harness.Result) float64 { return r.PerJob(r.Cost.Lists) })
			var extra []string
			keys := make([]string, 0)
			for k := range rs[0].Cost.Extra {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				extra = append(extra, fmt.Sprintf("%s %s", k, num(medOf(rs, func(r harness.Result) float64 { return r.PerJob(r.Cost.Extra[k]) }))))
			}
			fmt.Fprintf(w, "| %s | %d | %.0f (%.0f–%.0f) | %s | %s %s | %s | %s | %s |\n", n, rs[0].Jobs, median(rates),
				slices.Min(rates), slices.Max(rates), medianCPU(rs), num(mid), rs[0].WritesUnit, num(rd), num(ls), strings.Join(extra, ", "))
		}
		ratios(w, tp, names, "end-to-end jobs/s, SDK ÷ peer (higher is better for the SDK)",
			func(r harness.Result) float64 { return r.JobsPerSec })
		ratios(w, tp, names, "CPU per job (process + server), SDK ÷ peer (lower is better for the SDK)",
			func(r harness.Result) float64 { return float64(r.CPUPerJob) })
	}
	if fl := by["floor"]; len(fl) > 0 {
		fmt.Fprintln(w, "\n### The stores' floor: raw create-only 512-byte puts, 16 goroutines, same rounds")
		fmt.Fprint(w, "\nceiling = raw puts/s ÷ the job's writes; share = measured jobs/s ÷ ceiling, median of same-round ratios.\n\n")
		fmt.Fprintln(w, "| store | raw puts/s | writes/job | ceiling jobs/s | measured jobs/s | share of ceiling |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, n := range names {
			rs, tps := fl[n], by["throughput"][n]
			if len(rs) == 0 {
				continue
			}
			puts := medOf(rs, func(r harness.Result) float64 { return r.JobsPerSec })
			if len(tps) == 0 {
				fmt.Fprintf(w, "| %s | %.0f | | | | |\n", n, puts)
				continue
			}
			wpj := medOf(tps, func(r harness.Result) float64 { return r.PerJob(r.Cost.Writes) })
			jps := medOf(tps, func(r harness.Result) float64 { return r.JobsPerSec })
			var share []float64
			for _, f := range rs {
				for _, t := range tps {
					if f.Round == t.Round && f.JobsPerSec > 0 {
						share = append(share, t.JobsPerSec/(f.JobsPerSec/t.PerJob(t.Cost.Writes)))
					}
				}
			}
			fmt.Fprintf(w, "| %s | %.0f | %s | %.0f | %.0f | %.2f |\n", n, puts, num(wpj), puts/wpj, jps, median(share))
		}
	}
	if lt := by["latency"]; len(lt) > 0 {
		fmt.Fprintf(w, "\n### Enqueue→start latency at %.0f jobs/s from a separate process (medians of rounds)\n\n", rate)
		fmt.Fprintln(w, "| system | jobs | p50 | p99 | max (worst round) |")
		fmt.Fprintln(w, "|---|---|---|---|---|")
		for _, n := range names {
			rs := lt[n]
			if len(rs) == 0 {
				continue
			}
			p50 := medOf(rs, func(r harness.Result) float64 { return float64(r.P50) })
			p99 := medOf(rs, func(r harness.Result) float64 { return float64(r.P99) })
			var worst time.Duration
			for _, r := range rs {
				worst = max(worst, r.Max)
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", n, rs[0].Jobs, ms(time.Duration(p50)), ms(time.Duration(p99)), ms(worst))
		}
		ratios(w, lt, names, "p50 latency, SDK ÷ peer (lower is better for the SDK)",
			func(r harness.Result) float64 { return float64(r.P50) })
	}
}

// ratios prints, for each SDK system and each peer, the median over rounds
// of the ratio within a round: both numbers from the same minutes of the
// machine, so load from others cancels out better than in a ratio of
// medians.
func ratios(w io.Writer, byName map[string][]harness.Result, names []string, what string, f func(harness.Result) float64) {
	var sdk, peer []string
	for _, n := range names {
		if len(byName[n]) == 0 {
			continue
		}
		if peers[n] {
			peer = append(peer, n)
		} else {
			sdk = append(sdk, n)
		}
	}
	if len(sdk) == 0 || len(peer) == 0 {
		return
	}
	fmt.Fprintf(w, "\nSame-round ratios, %s, median over rounds:\n\n| SDK \\ peer | %s |\n|---|%s\n", what,
		strings.Join(peer, " | "), strings.Repeat("---|", len(peer)))
	for _, s := range sdk {
		cells := make([]string, len(peer))
		for i, p := range peer {
			var xs []float64
			for _, a := range byName[s] {
				for _, b := range byName[p] {
					if a.Round == b.Round && f(a) >= 0 && f(b) > 0 {
						xs = append(xs, f(a)/f(b))
					}
				}
			}
			cells[i] = "—"
			if len(xs) > 0 {
				cells[i] = fmt.Sprintf("%.3g", median(xs))
			}
		}
		fmt.Fprintf(w, "| %s | %s |\n", s, strings.Join(cells, " | "))
	}
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

// medianCPU is the cell of the median round by CPU per job: with an even
// number of rounds, the mean of the middle two, part by part, so the parts
// still add up to the total shown. Rounds whose server CPU is unknown are
// left out; when every round's is, the cell shows the process's median and
// the total as n/a.
func medianCPU(rs []harness.Result) string {
	known := slices.DeleteFunc(slices.Clone(rs), func(r harness.Result) bool { return r.CPUPerJob < 0 })
	if len(known) == 0 {
		return cpuCell(-1, median(mapf(rs, func(r harness.Result) float64 { return perJob(r, r.CPUProcess) })), -1)
	}
	slices.SortFunc(known, func(a, b harness.Result) int { return cmp.Compare(a.CPUPerJob, b.CPUPerJob) })
	mid := known[(len(known)-1)/2 : len(known)/2+1]
	var total, proc, srv float64
	for _, r := range mid {
		proc += perJob(r, r.CPUProcess) / float64(len(mid))
		srv += perJob(r, r.CPUServer) / float64(len(mid))
		total += float64(r.CPUPerJob) / float64(len(mid))
	}
	return cpuCell(time.Duration(total), proc, srv)
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
