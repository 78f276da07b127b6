// Command conveyor-bench runs the same no-op job workload through this SDK
// (memstore, SQLite, filestore, MinIO) and its peers (River on Postgres,
// asynq on Redis) at several W (worker slots, and as many enqueuing
// goroutines), with jobs inserted one at a time and in batches,
// interleaved over several rounds, and prints medians with every round's
// figure, the SDK/peer ratios of the same round, CPU per job (process and
// server), and each system's writes, reads and lists per job.
// scripts/bench.sh starts the servers and runs it; see docs/performance.md.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/bench/harness"
)

// options are the command's flags.
type options struct {
	modes, systems, latSystems, batchSystems string
	workers, latWorkers, batches             []int
	rounds, agents, enqueuers                int
	jobs, jobsFile, jobsMinIO                int
	seconds                                  time.Duration
	floorWrites, floorWorkers                int
	rate                                     float64
	latJobs                                  int
	pg, pgData, redisAddr, minioBin, dir     string
	riverFast                                bool
	out, cpuProfile                          string
	settleMax                                time.Duration
}

// defaultSystems are the comparison (29): the SDK on SQLite and on
// filestore, River with its defaults and with its fetch tuned (its
// defaults cap it at W jobs per 100 ms), asynq.
const defaultSystems = "sdk-sqlite,sdk-filestore,river,river-tuned,asynq"

func parseFlags() options {
	var o options
	flag.StringVar(&o.modes, "modes", "throughput,latency,floor", "what to measure: throughput, latency, floor (the SDK stores' raw write rate)")
	flag.StringVar(&o.systems, "systems", defaultSystems, "comma-separated systems, or all: "+strings.Join(allSystems, ","))
	flag.StringVar(&o.latSystems, "latency-systems", "sdk-sqlite,river,river-tuned,asynq",
		"systems measured in latency mode (memstore cannot be reached from another process)")
	workers := flag.String("workers", "1,4,16", "the W to measure at: worker slots, and as many enqueuing goroutines (throughput mode)")
	latWorkers := flag.String("latency-workers", "", "the W (worker slots) of latency mode; empty: as -workers")
	batches := flag.String("batch", "1,100", "jobs per enqueue call, each a measurement of its own: 1 one at a time (River's Insert, "+
		"the others' Enqueue), N>1 through the system's batch insert (River's InsertMany, the SDK's Queue.InsertMany); "+
		"systems without one (asynq) run at 1 only")
	flag.StringVar(&o.batchSystems, "batch-systems", "sdk-memstore,sdk-sqlite,river,river-tuned",
		"systems measured with batches too (filestore and MinIO may be added: their InsertMany writes a key at a time, no store commits several)")
	flag.BoolVar(&o.riverFast, "river-insert-many-fast", false, "River's batches through InsertManyFast (COPY FROM, no rows returned) instead of InsertMany")
	flag.DurationVar(&o.settleMax, "settle-max", 20*time.Second, "before each measurement of the rounds, wait up to this long for a quiet machine "+
		"(a checkpoint of the run's Postgres, whichever system is next, sync(2), then the machine's CPU under 5% busy for two 250 ms windows): what one system leaves running "+
		"must not slow the next; 0: no wait")
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds; medians are over rounds")
	flag.IntVar(&o.jobs, "jobs", 0, "jobs per throughput measurement; 0: sized per system, W and batch by a warm-up measurement to last -seconds")
	flag.IntVar(&o.jobsFile, "jobs-filestore", 0, "jobs per throughput measurement on filestore (0: as -jobs)")
	flag.IntVar(&o.jobsMinIO, "jobs-minio", 0, "jobs per throughput measurement on MinIO (0: as -jobs)")
	flag.DurationVar(&o.seconds, "seconds", 3*time.Second, "what a throughput measurement sized by its warm-up lasts")
	flag.IntVar(&o.enqueuers, "enqueuers", 0, "enqueuing goroutines in throughput mode; 0: W (earlier runs: 16 beside 100 slots)")
	flag.IntVar(&o.agents, "agents", 256, "agents (queue keys) the jobs are spread over")
	flag.IntVar(&o.floorWrites, "floor-writes", 2000, "raw writes per floor measurement (memstore: 10x, MinIO: 1/4)")
	flag.IntVar(&o.floorWorkers, "floor-workers", 16, "goroutines making the raw writes of the floor")
	flag.Float64Var(&o.rate, "rate", 20, "jobs per second from the separate enqueuing process (latency mode); "+
		"River's defaults run at most W jobs per 100 ms, so keep it below 10 W for a pickup latency rather than a backlog")
	flag.IntVar(&o.latJobs, "latency-jobs", 200, "jobs per latency measurement")
	flag.StringVar(&o.pg, "pg", os.Getenv("BENCH_PG_DSN"), "Postgres DSN for River (empty: River skipped)")
	flag.StringVar(&o.pgData, "pg-data", os.Getenv("BENCH_PG_DATA"),
		"that Postgres's data directory, on this machine: its postmaster.pid names the server whose CPU (the postmaster and all its processes) counts in River's CPU per job (empty: unknown)")
	flag.StringVar(&o.redisAddr, "redis", os.Getenv("BENCH_REDIS_ADDR"), "Redis host:port for asynq (empty: asynq skipped)")
	flag.StringVar(&o.minioBin, "minio", "auto", "MinIO server binary, auto to look for it, or none")
	flag.StringVar(&o.dir, "dir", os.TempDir(), "where SQLite, filestore and MinIO keep their data: a directory on the disk to measure, not tmpfs")
	flag.StringVar(&o.out, "json", "", "also write every measurement to this file as JSON")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the rounds (not the warm-up) to this file: "+
		"run one system alone, or the profile mixes them (the peers' servers are other processes and not in it)")
	flag.Parse()
	var err error
	if o.workers, err = ints(*workers); err == nil {
		o.latWorkers = o.workers
		if *latWorkers != "" {
			o.latWorkers, err = ints(*latWorkers)
		}
	}
	if err == nil {
		o.batches, err = ints(*batches)
	}
	if err != nil {
		log.Fatal(err)
	}
	return o
}

// ints parses a comma-separated list of positive integers (a batch of 0
// is 1: one at a time).
func ints(s string) ([]int, error) {
	var xs []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q: not a list of counts", s)
		}
		if !slices.Contains(xs, max(1, n)) {
			xs = append(xs, max(1, n))
		}
	}
	return xs, nil
}

func set(list string) map[string]bool {
	m := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		if s == "all" {
			for _, a := range allSystems {
				m[a] = true
			}
		} else if s != "" {
			m[s] = true
		}
	}
	return m
}

func main() {
	// The latency mode re-executes this binary as its enqueuing process.
	harness.MaybeChild()
	o := parseFlags()
	log.SetFlags(0)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	drivers, closeAll := openDrivers(ctx, o)
	defer closeAll()
	if len(drivers) == 0 {
		log.Fatal("no system to measure")
	}
	enq := "W"
	if o.enqueuers > 0 {
		enq = strconv.Itoa(o.enqueuers)
	}
	fmt.Printf("conveyor-bench: %s, GOMAXPROCS %d, %d rounds, W %v (latency W %v), enqueuers %s, batches %v, %d agents\n",
		runtime.Version(), runtime.GOMAXPROCS(0), o.rounds, o.workers, o.latWorkers, enq, o.batches, o.agents)
	b := bench{o: o, drivers: drivers, sizes: map[cfgKey]int{}}
	began := time.Now()
	if strings.Contains(o.modes, "throughput") {
		b.size(ctx)
	}
	sized := time.Now()
	stopProfile := startProfile(o.cpuProfile)
	for r := range o.rounds {
		b.round(ctx, r)
	}
	stopProfile()
	log.Printf("took %s: warm-up %s, rounds %s", time.Since(began).Round(time.Second),
		sized.Sub(began).Round(time.Second), time.Since(sized).Round(time.Second))
	report(os.Stdout, b.results, o.rate)
	if o.out != "" {
		out, _ := json.MarshalIndent(b.results, "", "  ")
		if err := os.WriteFile(o.out, out, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// startProfile starts a CPU profile to path (none when path is empty) and
// returns what stops it.
func startProfile(path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		log.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			log.Fatal(err)
		}
	}
}

// openDrivers opens the systems o asks for; closeAll closes them (and stops
// MinIO).
func openDrivers(ctx context.Context, o options) (drivers []harness.Driver, closeAll func()) {
	var stops []func()
	closeAll = func() {
		for _, d := range drivers {
			d.Close()
		}
		for _, s := range stops {
			s()
		}
	}
	want := set(o.systems)
	add := func(d harness.Driver) { drivers = append(drivers, d) }
	if want[harness.NameMemstore] {
		add(harness.NewMemstore())
	}
	if want[harness.NameSQLite] {
		add(harness.NewSQLite(o.dir))
	}
	if want[harness.NameFilestore] {
		add(harness.NewFilestore(o.dir))
	}
	if want[harness.NameMinIO] {
		bin := o.minioBin
		if bin == "auto" {
			b, err := harness.MinIOBinary()
			if err != nil {
				log.Printf("skipping %s: %v", harness.NameMinIO, err)
			}
			bin = b
		}
		if bin != "" && bin != "none" {
			m, err := harness.StartMinIO(ctx, bin, o.dir)
			if err != nil {
				closeAll()
				log.Fatalf("starting MinIO: %v", err)
			}
			stops = append(stops, func() { m.Stop() })
			add(harness.NewMinIO(m))
		}
	}
	for _, name := range []string{harness.NameRiver, harness.NameRiverTuned} {
		if !want[name] {
			continue
		}
		if o.pg == "" {
			log.Printf("skipping %s: no -pg DSN", name)
			continue
		}
		d, err := harness.NewRiver(ctx, harness.RiverConfig{Name: name, DSN: o.pg, PGData: o.pgData, InsertManyFast: o.riverFast})
		if err != nil {
			closeAll()
			log.Fatalf("%s: %v", name, err)
		}
		if _, err := d.ServerCPU(ctx); err != nil {
			log.Printf("%s: its CPU per job will be n/a: %v", name, err)
		}
		add(d)
	}
	if want[harness.NameAsynq] {
		if o.redisAddr == "" {
			log.Printf("skipping %s: no -redis address", harness.NameAsynq)
		} else {
			d, err := harness.OpenAsynq(ctx, o.redisAddr)
			if err != nil {
				closeAll()
				log.Fatalf("asynq: %v", err)
			}
			add(d)
		}
	}
	return drivers, closeAll
}

// cfgKey is one throughput configuration: a system at one W and batch.
type cfgKey struct {
	system       string
	workers, bat int
}

// bench is one run: its drivers, the jobs each throughput configuration
// runs (from the warm-up) and the results so far.
type bench struct {
	o       options
	drivers []harness.Driver
	sizes   map[cfgKey]int
	results []harness.Result
}

// batchesOf are the batch sizes d is measured at.
func (b *bench) batchesOf(d harness.Driver) []int {
	_, ok := d.(harness.Batcher)
	if !ok || !set(b.o.batchSystems)[d.Name()] {
		return []int{1}
	}
	return b.o.batches
}

// enqueuers is how many goroutines enqueue at W = w.
func (b *bench) enqueuers(w int) int { return cmp.Or(b.o.enqueuers, w) }

// fixedJobs is the jobs -jobs and its per-store flags set for d, 0 when the
// warm-up sizes them.
func (b *bench) fixedJobs(d harness.Driver) int {
	switch d.Name() {
	case harness.NameFilestore:
		return cmp.Or(b.o.jobsFile, b.o.jobs)
	case harness.NameMinIO:
		return cmp.Or(b.o.jobsMinIO, b.o.jobs)
	}
	return b.o.jobs
}

// Warm-up sizing: a short measurement per configuration (which also takes
// the cold start off round 1), whose rate sets the jobs of its rounds so
// each lasts about -seconds, within [minJobs, maxJobs], two significant
// digits.
const (
	minJobs = 100
	maxJobs = 30000
)

func (b *bench) size(ctx context.Context) {
	var est time.Duration
	for _, w := range b.o.workers {
		for _, d := range b.drivers {
			for _, bat := range b.batchesOf(d) {
				k := cfgKey{d.Name(), w, bat}
				if n := b.fixedJobs(d); n > 0 {
					b.sizes[k] = n
					continue
				}
				n0 := min(2000, max(50*w, min(bat*w, 2000)))
				res, err := harness.Throughput(ctx, d, harness.ThroughputConfig{Jobs: n0, Agents: b.o.agents, Slots: w, Enqueuers: b.enqueuers(w), Batch: bat})
				if err != nil {
					log.Fatalf("warm-up: %v", err)
				}
				n := max(minJobs, min(maxJobs, twoDigits(res.JobsPerSec*b.o.seconds.Seconds())))
				b.sizes[k] = n
				est += time.Duration(float64(n) / res.JobsPerSec * float64(time.Second))
				log.Printf("warm-up    W=%-3d %-14s %-16s %6d jobs %8.1f jobs/s: %d jobs a round", w, d.Name(),
					insertLabel(res.Batch, res.Insert), n0, res.JobsPerSec, n)
			}
		}
	}
	if est > 0 {
		log.Printf("throughput rounds: about %s of jobs a round, plus each measurement's set-up", est.Round(time.Second))
	}
}

func twoDigits(x float64) int {
	if x < 100 {
		return int(x)
	}
	p := math.Pow(10, math.Floor(math.Log10(x))-1)
	return int(math.Round(x/p) * p)
}

// round runs one round: every system at every W and batch, then the
// floors, then latency. Each round starts with a different system, so none
// is always measured first (on a cold cache) or last (after the others'
// background work, e.g. Postgres's checkpoints).
func (b *bench) round(ctx context.Context, r int) {
	order := slices.Clone(b.drivers)
	rot := r % len(order)
	order = append(order[rot:], order[:rot]...)
	if strings.Contains(b.o.modes, "throughput") {
		for _, w := range b.o.workers {
			for _, d := range order {
				for _, bat := range b.batchesOf(d) {
					b.throughput(ctx, r, d, w, bat)
				}
			}
		}
	}
	if strings.Contains(b.o.modes, "floor") {
		for _, d := range order {
			b.floor(ctx, r, d)
		}
	}
	if strings.Contains(b.o.modes, "latency") {
		lat := set(b.o.latSystems)
		for _, w := range b.o.latWorkers {
			for _, d := range order {
				if !lat[d.Name()] || d.Name() == harness.NameMemstore {
					continue
				}
				res, err := harness.Latency(ctx, d, harness.LatencyConfig{Jobs: b.o.latJobs, Rate: b.o.rate, Slots: w, Agents: b.o.agents,
					Settle: b.settle()})
				if err != nil {
					log.Fatalf("round %d: W=%d: %v", r+1, w, err)
				}
				res.Round = r + 1
				b.results = append(b.results, res)
				log.Printf("round %d latency    W=%-3d %-14s %6d jobs at %.0f/s  p50 %s  p99 %s  max %s%s", r+1, w, d.Name(), res.Jobs, b.o.rate,
					ms(res.P50), ms(res.P99), ms(res.Max), settleNote(res.Settled))
			}
		}
	}
}

// settleNote is how long the wait for a quiet machine took, for the log.
func settleNote(s *harness.Settled) string {
	switch {
	case s == nil:
		return ""
	case !s.Quiet:
		return fmt.Sprintf("  (not quiet after %s: %.0f%% busy)", s.Waited.Round(100*time.Millisecond), 100*s.Busy)
	}
	return fmt.Sprintf("  (settled in %s)", s.Waited.Round(100*time.Millisecond))
}

// settle is the wait for a quiet machine before a measurement of the
// rounds (not the warm-up's), or nil for none (-settle-max 0).
func (b *bench) settle() *harness.SettleConfig {
	if b.o.settleMax <= 0 {
		return nil
	}
	return &harness.SettleConfig{Max: b.o.settleMax, Also: b.drivers}
}

func (b *bench) throughput(ctx context.Context, r int, d harness.Driver, w, bat int) {
	n := b.sizes[cfgKey{d.Name(), w, bat}]
	res, err := harness.Throughput(ctx, d, harness.ThroughputConfig{Jobs: n, Agents: b.o.agents, Slots: w, Enqueuers: b.enqueuers(w), Batch: bat,
		Settle: b.settle()})
	if err != nil {
		log.Fatalf("round %d: W=%d: %v", r+1, w, err)
	}
	res.Round = r + 1
	b.results = append(b.results, res)
	log.Printf("round %d throughput W=%-3d %-14s %-16s %6d jobs %8.1f jobs/s  cpu/job %s ms  %s%s", r+1, w, d.Name(),
		insertLabel(res.Batch, res.Insert), n, res.JobsPerSec,
		cpuCell(res.CPUPerJob, perJob(res, res.CPUProcess), perJob(res, res.CPUServer)), costLine(res), settleNote(res.Settled))
	if res.CPUError != "" {
		log.Printf("round %d throughput W=%-3d %-14s server CPU unknown: %s", r+1, w, d.Name(), res.CPUError)
	}
}

func (b *bench) floor(ctx context.Context, r int, d harness.Driver) {
	if _, ok := d.(harness.Floorer); !ok {
		return
	}
	n := b.o.floorWrites
	switch d.Name() {
	case harness.NameMemstore:
		n *= 10
	case harness.NameMinIO:
		n /= 4
	}
	res, err := harness.Floor(ctx, d, n, b.o.floorWorkers)
	if err != nil {
		log.Fatalf("round %d: %v", r+1, err)
	}
	res.Round = r + 1
	b.results = append(b.results, res)
	log.Printf("round %d floor      %-14s %6d raw create-only puts %8.0f puts/s", r+1, d.Name(), n, res.JobsPerSec)
}

var allSystems = []string{harness.NameMemstore, harness.NameSQLite, harness.NameFilestore, harness.NameMinIO,
	harness.NameRiver, harness.NameRiverTuned, harness.NameAsynq}

var peers = map[string]bool{harness.NameRiver: true, harness.NameRiverTuned: true, harness.NameAsynq: true}
