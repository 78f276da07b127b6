package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is one measurement of one system.
type Result struct {
	System string `json:"system"`
	Mode   string `json:"mode"` // "throughput" or "latency"
	Round  int    `json:"round"`
	// Workers is W: the worker slots, and in throughput mode the
	// enqueuing goroutines too.
	Workers int `json:"workers"`
	// Batch is how many jobs each enqueue call inserted (1: one at a
	// time), and Insert names the call (Enqueue, River's Insert,
	// InsertMany, InsertManyFast).
	Batch   int           `json:"batch"`
	Insert  string        `json:"insert"`
	Jobs    int           `json:"jobs"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// JobsPerSec is Jobs over Elapsed: from the first enqueue to the last
	// completion the system recorded (throughput mode).
	JobsPerSec float64 `json:"jobs_per_sec"`
	// Cost is the change of the system's Counters over the measurement.
	Cost       Counters `json:"cost"`
	WritesUnit string   `json:"writes_unit"`
	// CPUProcess is this process's user+system CPU over the same window
	// as JobsPerSec (getrusage deltas): the system's client and workers,
	// and the harness's enqueuers (throughput mode).
	CPUProcess time.Duration `json:"cpu_process_ns"`
	// CPUServer is the system's server's CPU over that window
	// (Driver.ServerCPU deltas): 0 for a system with no server, -1 when
	// it could not be read (CPUError says why).
	CPUServer time.Duration `json:"cpu_server_ns"`
	// CPUPerJob is (CPUProcess + CPUServer) / Jobs; -1 when CPUServer is
	// unknown.
	CPUPerJob time.Duration `json:"cpu_per_job_ns"`
	CPUError  string        `json:"cpu_error,omitempty"`
	// P50 and P99 are enqueue→start latencies (latency mode).
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
	// Settled is the wait for a quiet machine before the measurement
	// (Settle), when one was asked for.
	Settled *Settled `json:"settled,omitempty"`
}

// PerJob is a cost per job, or -1 where the system does not expose it.
func (r Result) PerJob(v int64) float64 {
	if v < 0 || r.Jobs == 0 {
		return -1
	}
	return float64(v) / float64(r.Jobs)
}

// drainer is a driver whose Done comes slightly before the last writes
// of a job (asynq's completion, the SDK's audit events); Drain waits for
// them, so a run's end time and costs include them.
type drainer interface {
	Drain(ctx context.Context) error
}

// ThroughputConfig sizes a throughput measurement.
type ThroughputConfig struct {
	Jobs, Agents, Slots, Enqueuers int
	// Batch is how many jobs each enqueue call inserts: 0 or 1 one at a
	// time (Driver.Enqueue), more through the driver's batch insert
	// (Batcher.EnqueueMany), the last call taking what is left.
	Batch int
	// Timeout bounds the whole measurement; 0 means 2 minutes plus 100 ms
	// a job, generous for the slowest system.
	Timeout time.Duration
	// Settle, when set, waits for a quiet machine after the reset and
	// before the workers start (Settle).
	Settle *SettleConfig
}

// Throughput runs cfg.Jobs no-op jobs end to end through d: workers with
// cfg.Slots slots are started first, then cfg.Enqueuers goroutines enqueue
// the jobs (job i for agent i mod cfg.Agents), one call each or cfg.Batch a
// call, as an application would; the rate is jobs over the time from the
// first enqueue to the last completion.
func Throughput(ctx context.Context, d Driver, cfg ThroughputConfig) (Result, error) {
	res := Result{System: d.Name(), Mode: "throughput", Workers: cfg.Slots, Batch: max(1, cfg.Batch),
		Insert: InsertCall(d, cfg.Batch), Jobs: cfg.Jobs, WritesUnit: d.WritesUnit()}
	b, batched := d.(Batcher)
	if cfg.Batch > 1 && !batched {
		return res, fmt.Errorf("%s: no batch insert", d.Name())
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 2*time.Minute + time.Duration(cfg.Jobs)*100*time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := d.Reset(ctx); err != nil {
		return res, fmt.Errorf("%s: reset: %w", d.Name(), err)
	}
	if err := settle(ctx, d, cfg.Settle, &res); err != nil {
		return res, err
	}
	before, err := d.Counters(ctx)
	if err != nil {
		return res, fmt.Errorf("%s: counters: %w", d.Name(), err)
	}
	var done atomic.Int64
	all := make(chan struct{})
	stop, err := d.Work(ctx, cfg.Slots, Hooks{Started: func(Payload) {}, Done: func() {
		if done.Add(1) == int64(cfg.Jobs) {
			close(all)
		}
	}})
	if err != nil {
		return res, fmt.Errorf("%s: work: %w", d.Name(), err)
	}
	// The CPU window is the rate's: read right before the first enqueue
	// and right after the last completion (and Drain), before stop.
	cpu0, err := readCPU(ctx, d, false)
	if err != nil {
		stop()
		return res, fmt.Errorf("%s: %w", d.Name(), err)
	}
	start := time.Now()
	var next atomic.Int64
	errc := make(chan error, cfg.Enqueuers)
	var wg sync.WaitGroup
	step := int64(max(1, cfg.Batch))
	for range cfg.Enqueuers {
		wg.Go(func() {
			for i := int(next.Add(step) - step); i < cfg.Jobs; i = int(next.Add(step) - step) {
				var err error
				if step == 1 {
					err = d.Enqueue(ctx, Payload{Agent: i % cfg.Agents, Seq: i, EnqueuedAt: now()})
				} else {
					ps := make([]Payload, min(cfg.Jobs, i+int(step))-i)
					t := now()
					for k := range ps {
						ps[k] = Payload{Agent: (i + k) % cfg.Agents, Seq: i + k, EnqueuedAt: t}
					}
					err = b.EnqueueMany(ctx, ps)
				}
				if err != nil {
					errc <- fmt.Errorf("%s: enqueue: %w", d.Name(), err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err = <-errc:
	default:
	}
	if err == nil {
		select {
		case <-all:
			if dr, ok := d.(drainer); ok {
				err = dr.Drain(ctx)
			}
		case <-ctx.Done():
			err = fmt.Errorf("%s: %d of %d jobs done: %w", d.Name(), done.Load(), cfg.Jobs, ctx.Err())
		}
	}
	res.Elapsed = time.Since(start)
	res.JobsPerSec = float64(cfg.Jobs) / res.Elapsed.Seconds()
	if err == nil {
		var cpu1 cpuReading
		if cpu1, err = readCPU(ctx, d, true); err != nil {
			err = fmt.Errorf("%s: %w", d.Name(), err)
		}
		res.setCPU(cpu0, cpu1)
	}
	if serr := stop(); err == nil && serr != nil {
		err = fmt.Errorf("%s: stop: %w", d.Name(), serr)
	}
	if err != nil {
		return res, err
	}
	after, err := d.Counters(context.WithoutCancel(ctx))
	if err != nil {
		return res, fmt.Errorf("%s: counters: %w", d.Name(), err)
	}
	res.Cost = after.sub(before)
	return res, nil
}

// InsertCall names how d inserts at batch size batch: the one-job call
// (River's Insert, the others' Enqueue) at 0 or 1, else its batch call.
func InsertCall(d Driver, batch int) string {
	if batch > 1 {
		if b, ok := d.(Batcher); ok {
			return b.BatchCall()
		}
		return "none"
	}
	if _, ok := d.(*riverDriver); ok {
		return "Insert"
	}
	return "Enqueue"
}

// cpuReading is the cumulative CPU of this process and of a system's
// server at one instant; serverErr is why the server's could not be read.
type cpuReading struct {
	process, server time.Duration
	serverErr       error
}

// readCPU reads both. Reading a server costs this process CPU (a walk of
// /proc for Postgres takes a few milliseconds), so at the window's start
// the server is read before this process, and at its end after: neither
// reading falls inside this process's delta. Only getrusage failing is an
// error; a server that cannot be read leaves its CPU unknown in the result,
// not the run failed.
func readCPU(ctx context.Context, d Driver, end bool) (cpuReading, error) {
	var r cpuReading
	if !end {
		r.server, r.serverErr = d.ServerCPU(ctx)
	}
	var err error
	r.process, err = processCPU()
	if end {
		r.server, r.serverErr = d.ServerCPU(ctx)
	}
	return r, err
}

func (r *Result) setCPU(a, b cpuReading) {
	r.CPUProcess = b.process - a.process
	r.CPUServer, r.CPUPerJob = -1, -1
	switch {
	case a.serverErr != nil:
		r.CPUError = a.serverErr.Error()
	case b.serverErr != nil:
		r.CPUError = b.serverErr.Error()
	case r.Jobs > 0:
		r.CPUServer = b.server - a.server
		r.CPUPerJob = (r.CPUProcess + r.CPUServer) / time.Duration(r.Jobs)
	}
}

// LatencyConfig sizes a latency measurement.
type LatencyConfig struct {
	Jobs  int
	Rate  float64 // jobs per second, from the separate process
	Slots int
	// Agents spreads the jobs as in throughput mode.
	Agents int
	// Settle is as ThroughputConfig's.
	Settle *SettleConfig
}

// ChildEnv names the environment variable that makes a process (the bench
// binary or a test binary, re-executed) the enqueuing side of a latency
// measurement: MaybeChild reads it.
const ChildEnv = "CONVEYOR_BENCH_CHILD"

type childSpec struct {
	System, Addr string
	Jobs, Agents int
	Rate         float64
}

// Latency measures enqueue→start from a separate process: this process
// runs d's workers, and a re-execution of its own binary (see MaybeChild)
// enqueues cfg.Jobs jobs at cfg.Rate, open loop (each job at its time, not
// after the previous enqueue returned), stamping each with the time its
// enqueue began. Latency is the time from that stamp to the handler's
// start here.
func Latency(ctx context.Context, d Driver, cfg LatencyConfig) (Result, error) {
	res := Result{System: d.Name(), Mode: "latency", Workers: cfg.Slots, Batch: 1, Insert: InsertCall(d, 1), Jobs: cfg.Jobs}
	if err := d.Reset(ctx); err != nil {
		return res, fmt.Errorf("%s: reset: %w", d.Name(), err)
	}
	if err := settle(ctx, d, cfg.Settle, &res); err != nil {
		return res, err
	}
	if d.Addr() == "" {
		return res, fmt.Errorf("%s: no other process can reach it", d.Name())
	}
	timeout := time.Duration(float64(cfg.Jobs)/cfg.Rate*float64(time.Second)) + 2*time.Minute
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	lat := make([]time.Duration, cfg.Jobs)
	var started, done atomic.Int64
	all := make(chan struct{})
	stop, err := d.Work(ctx, cfg.Slots, Hooks{
		Started: func(p Payload) {
			if p.Seq >= 0 && p.Seq < len(lat) {
				lat[p.Seq] = time.Duration(now() - p.EnqueuedAt)
				started.Add(1)
			}
		},
		Done: func() {
			if done.Add(1) == int64(cfg.Jobs) {
				close(all)
			}
		},
	})
	if err != nil {
		return res, fmt.Errorf("%s: work: %w", d.Name(), err)
	}
	spec, _ := json.Marshal(childSpec{System: d.Name(), Addr: d.Addr(), Jobs: cfg.Jobs, Agents: cfg.Agents, Rate: cfg.Rate})
	exe, err := os.Executable()
	if err != nil {
		stop()
		return res, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), ChildEnv+"="+string(spec))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		stop()
		return res, err
	}
	werr := make(chan error, 1)
	go func() { werr <- cmd.Wait() }()
	select {
	case <-all:
		err = <-werr
	case err = <-werr:
		if err == nil {
			select {
			case <-all:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
	}
	if dr, ok := d.(drainer); ok && err == nil {
		err = dr.Drain(ctx)
	}
	res.Elapsed = time.Since(start)
	if serr := stop(); err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return res, fmt.Errorf("%s: %d of %d jobs started, %d done: %w", d.Name(), started.Load(), cfg.Jobs, done.Load(), err)
	}
	slices.Sort(lat)
	res.P50, res.P99, res.Max = Percentile(lat, 0.50), Percentile(lat, 0.99), lat[len(lat)-1]
	return res, nil
}

// Percentile returns the q-quantile of sorted (nearest rank).
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// MaybeChild makes this process the enqueuing side of a Latency run when
// ChildEnv is set, and then exits; otherwise it returns at once. Call it
// first in main and in TestMain.
func MaybeChild() {
	v := os.Getenv(ChildEnv)
	if v == "" {
		return
	}
	if err := child(v); err != nil {
		fmt.Fprintln(os.Stderr, "enqueuing process:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func child(v string) error {
	var s childSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return err
	}
	ctx := context.Background()
	d, err := Open(ctx, s.System, s.Addr)
	if err != nil {
		return err
	}
	defer d.Close()
	period := time.Duration(float64(time.Second) / s.Rate)
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	// How long each enqueue call took: part of every job's latency, and
	// printed so a slow store's share of it is seen, not guessed.
	calls := make([]time.Duration, s.Jobs)
	// Bounded so a system that stops answering cannot pile up goroutines
	// without end; at 100 jobs/s, 256 in flight is 2.5 s of backlog.
	sem := make(chan struct{}, 256)
	for i := range s.Jobs {
		time.Sleep(time.Until(t0.Add(time.Duration(i) * period)))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			began := time.Now()
			err := d.Enqueue(ctx, Payload{Agent: i % max(1, s.Agents), Seq: i, EnqueuedAt: now()})
			calls[i] = time.Since(began)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d enqueues failed, first: %w", len(errs), errs[0])
	}
	slices.Sort(calls)
	fmt.Fprintf(os.Stderr, "  %s: the enqueue call itself (separate process): p50 %.1f ms  p99 %.1f ms\n", s.System,
		float64(Percentile(calls, 0.50))/1e6, float64(Percentile(calls, 0.99))/1e6)
	return nil
}

// Floorer is a driver that can measure its store's raw write rate (the
// SDK's drivers); see sdkDriver.Floor.
type Floorer interface {
	Floor(ctx context.Context, n, workers int) (float64, error)
}

// Floor measures d's raw durable-write rate as a Result of mode "floor",
// its JobsPerSec holding writes per second.
func Floor(ctx context.Context, d Driver, n, workers int) (Result, error) {
	res := Result{System: d.Name(), Mode: "floor", Jobs: n}
	f, ok := d.(Floorer)
	if !ok {
		return res, fmt.Errorf("%s: no store floor", d.Name())
	}
	start := time.Now()
	rate, err := f.Floor(ctx, n, workers)
	res.Elapsed, res.JobsPerSec = time.Since(start), rate
	if err != nil {
		return res, fmt.Errorf("%s: floor: %w", d.Name(), err)
	}
	return res, nil
}
