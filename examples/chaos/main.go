// Command chaos is the chaos program of issue 10: several worker processes
// share one job queue on one store (a filestore directory, a SQLite file
// or a MinIO bucket) while a seeded chaos loop kills them (SIGKILL), pauses them past
// their lease (SIGSTOP, then SIGCONT), overwrites job records and agent
// locks with garbage, and stops the store for a while. When the chaos
// window closes the system is given a bounded time to drain; then the
// program checks what docs/spec.md#recovery and the README's "Faults" promise:
//
//   - every job ends COMPLETE or DEAD, or quarantined (its record moved
//     under quarantine/ because chaos corrupted it);
//   - every COMPLETE job has exactly one finalized artifact, keyed by the
//     job, whose job, run and agent agree with the job record; no job that
//     is not COMPLETE has one;
//   - no late write was accepted: no artifact was created after the attempt
//     that produced it had lost its job (the job's audit trail says when);
//   - the audit log replays through the job machine to every record's state;
//   - nothing was quarantined that chaos did not corrupt;
//   - every worker stops within a grace period of SIGTERM.
//
// It prints a summary and exits 1 on any violation.
//
//	go run ./examples/chaos -store file -workers 3 -jobs 200 -duration 30s -seed 1
//	go run ./examples/chaos -store sqlite -workers 3 -jobs 200 -duration 30s -seed 1
//	go run ./examples/chaos -store minio -workers 3 -jobs 200 -duration 30s -seed 1
//
// The MinIO server binary is found through $MINIO_BIN, PATH or
// $(go env GOPATH)/bin, as the repository's tests find it. Each fault has
// its own flag (-kill, -pause, -corrupt, -outage, -hang) so each can be tried alone.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// workerEnv marks a worker process (the same binary re-executed). Test
// binaries look at it in TestMain, before the testing flags are parsed.
const workerEnv = "CONVEYOR_CHAOS_WORKER"

// Main parses args and runs the parent (the default) or a worker (-worker).
// It returns the exit code: 0 when every check passed, 1 on a violation, 2
// on a usage or setup error.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := DefaultOptions()
	o.bind(fs)
	var worker WorkerOptions
	isWorker := fs.Bool("worker", false, "run as a worker process (the parent starts these)")
	worker.bind(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *isWorker || os.Getenv(workerEnv) != "" {
		worker.Store, worker.Dir = o.Store, o.Dir
		worker.Lease, worker.Step, worker.Poll, worker.Sweep = o.Lease, o.Step, o.Poll, o.Sweep
		worker.Slots, worker.FailRate, worker.HangRate, worker.Seed = o.Slots, o.FailRate, o.HangRate, o.Seed
		worker.Work, worker.HangFor = o.Work, o.HangFor
		return RunWorker(worker, stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.Log = stderr
	rep, err := Run(ctx, o)
	if rep != nil {
		rep.Print(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 2
	}
	if len(rep.Violations) > 0 {
		return 1
	}
	return 0
}

// Options configure a chaos run (the parent).
type Options struct {
	Store   string // "file", "sqlite" or "minio"
	Dir     string // filestore root or the SQLite file's directory; empty: a fresh temporary directory, removed after
	Workers int    // worker processes
	Slots   int    // jobs one worker runs at once
	Jobs    int    // jobs enqueued, spread over the first 70 % of Duration
	Agents  int    // agents the jobs are spread over (one running job per agent)
	Seed    uint64 // seeds the chaos loop and the handlers' faults

	Duration time.Duration // the chaos window
	Drain    time.Duration // longest wait, after it, for every job to settle
	Interval time.Duration // mean time between two faults

	// Queue timing, short so that a run takes seconds.
	Lease, Step, Poll, Sweep time.Duration
	// Work is the mean simulated work of a handler call (each of the two
	// takes 0.25 to 1.75 times it).
	Work time.Duration

	// Faults, each switched on separately.
	Kill, Pause, Corrupt, Outage bool
	OutageFor                    time.Duration // how long the store is stopped
	FailRate                     float64       // share of handler calls answering 503
	HangRate                     float64       // share of handler calls ignoring their ctx
	HangFor                      time.Duration // for how long

	// Grace is how long a worker may take to stop after SIGTERM.
	Grace time.Duration

	// LogDir keeps the workers' logs (stderr); empty: under the run's
	// temporary directory, removed after unless KeepLogs.
	LogDir string
	// Log receives the parent's progress lines; nil discards them.
	Log io.Writer
}

// DefaultOptions is a run of about half a minute.
func DefaultOptions() Options {
	return Options{
		Store: "file", Workers: 3, Slots: 2, Jobs: 100, Agents: 8, Seed: 1,
		Duration: 20 * time.Second, Drain: 20 * time.Second, Interval: 1500 * time.Millisecond,
		Lease: time.Second, Step: 500 * time.Millisecond, Poll: 50 * time.Millisecond, Sweep: time.Second, Work: 60 * time.Millisecond,
		Kill: true, Pause: true, Corrupt: true, Outage: true, OutageFor: 3 * time.Second,
		FailRate: 0.08, HangRate: 0, HangFor: 2 * time.Second, Grace: 5 * time.Second,
	}
}

func (o *Options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.Store, "store", o.Store, "store: file, sqlite (one SQLite file in -dir) or minio")
	fs.StringVar(&o.Dir, "dir", o.Dir, "filestore directory, or the SQLite file's (default: a temporary one)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "worker processes")
	fs.IntVar(&o.Slots, "slots", o.Slots, "jobs a worker runs at once")
	fs.IntVar(&o.Jobs, "jobs", o.Jobs, "jobs to enqueue")
	fs.IntVar(&o.Agents, "agents", o.Agents, "agents the jobs are spread over")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "random seed")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "chaos window")
	fs.DurationVar(&o.Drain, "drain", o.Drain, "longest wait after the chaos window for every job to settle")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "mean time between faults")
	fs.DurationVar(&o.Lease, "lease", o.Lease, "jobqueue LeaseTTL")
	fs.DurationVar(&o.Step, "step", o.Step, "jobqueue StepTimeout")
	fs.DurationVar(&o.Poll, "poll", o.Poll, "worker PollInterval")
	fs.DurationVar(&o.Sweep, "sweep", o.Sweep, "worker SweepInterval")
	fs.DurationVar(&o.Work, "work", o.Work, "mean simulated work per handler call")
	fs.BoolVar(&o.Kill, "kill", o.Kill, "fault: kill -9 a worker, then start a new one")
	fs.BoolVar(&o.Pause, "pause", o.Pause, "fault: SIGSTOP a worker past its lease, then SIGCONT")
	fs.BoolVar(&o.Corrupt, "corrupt", o.Corrupt, "fault: overwrite a job record or agent lock with garbage")
	fs.BoolVar(&o.Outage, "outage", o.Outage, "fault: stop the store for -outage-for")
	fs.DurationVar(&o.OutageFor, "outage-for", o.OutageFor, "length of a store outage")
	fs.Float64Var(&o.FailRate, "fail-rate", o.FailRate, "fault: share of handler calls that answer 503")
	fs.Float64Var(&o.HangRate, "hang-rate", o.HangRate, "fault: share of handler calls that ignore their ctx for -hang-for")
	fs.DurationVar(&o.HangFor, "hang-for", o.HangFor, "how long a hung handler call ignores its ctx")
	fs.DurationVar(&o.Grace, "grace", o.Grace, "how long a worker may take to stop after SIGTERM")
	fs.StringVar(&o.LogDir, "logs", o.LogDir, "directory for the workers' logs (default: temporary, removed)")
}

// faults names the faults switched on.
func (o Options) faults() string {
	var f []string
	for _, x := range []struct {
		on   bool
		name string
	}{{o.Kill, "kill"}, {o.Pause, "pause"}, {o.Corrupt, "corrupt"}, {o.Outage, "outage"},
		{o.FailRate > 0, fmt.Sprintf("503@%g", o.FailRate)}, {o.HangRate > 0, fmt.Sprintf("hang@%g", o.HangRate)}} {
		if x.on {
			f = append(f, x.name)
		}
	}
	if len(f) == 0 {
		return "none"
	}
	return strings.Join(f, ",")
}
