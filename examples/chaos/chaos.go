package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Report is what a run did and found.
type Report struct {
	Options Options

	Jobs, Complete, Dead, Quarantined, Open int
	QuarantineRecords, Artifacts            int
	ReusedArtifacts                         int // COMPLETE with an artifact of an earlier attempt
	Attempts                                int

	Kills, Pauses, Corruptions, Outages int
	Chaos, Drained, Total               time.Duration
	Settled                             bool

	// DeadWhy gives each DEAD job's last error.
	DeadWhy []string
	// WorkerLog counts the workers' log lines by message.
	WorkerLog map[string]int
	// Kept is where the logs (and a filestore) were left for a look, if
	// anywhere.
	Kept       string
	Violations []Violation
}

// Print writes the summary.
func (r *Report) Print(w io.Writer) {
	o := r.Options
	fmt.Fprintf(w, "chaos: store=%s workers=%d slots=%d jobs=%d agents=%d seed=%d faults=%s lease=%s step=%s work=%s\n",
		o.Store, o.Workers, o.Slots, o.Jobs, o.Agents, o.Seed, o.faults(), o.Lease, o.Step, o.Work)
	fmt.Fprintf(w, "  faults injected: %d kills, %d pauses, %d corruptions, %d outages (of %s) in %s\n",
		r.Kills, r.Pauses, r.Corruptions, r.Outages, o.OutageFor, r.Chaos.Round(time.Millisecond))
	settled := "settled"
	if !r.Settled {
		settled = "NOT settled"
	}
	fmt.Fprintf(w, "  drain: %s after %s; total %s\n", settled, r.Drained.Round(time.Millisecond), r.Total.Round(time.Millisecond))
	fmt.Fprintf(w, "  jobs: %d: %d COMPLETE, %d DEAD, %d quarantined, %d open; %d attempts; %d artifacts (%d from an earlier attempt); %d quarantine records\n",
		r.Jobs, r.Complete, r.Dead, r.Quarantined, r.Open, r.Attempts, r.Artifacts, r.ReusedArtifacts, r.QuarantineRecords)
	for i, d := range r.DeadWhy {
		if i == 5 {
			fmt.Fprintf(w, "    ... and %d DEAD more\n", len(r.DeadWhy)-i)
			break
		}
		fmt.Fprintf(w, "    DEAD %s\n", d)
	}
	if len(r.WorkerLog) > 0 {
		type kv struct {
			k string
			n int
		}
		var l []kv
		for k, n := range r.WorkerLog {
			l = append(l, kv{k, n})
		}
		sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || l[i].n == l[j].n && l[i].k < l[j].k })
		fmt.Fprintf(w, "  worker log lines (warnings and errors):\n")
		for i, x := range l {
			if i == 10 {
				fmt.Fprintf(w, "      ... and %d kinds more\n", len(l)-i)
				break
			}
			fmt.Fprintf(w, "    %5d× %s\n", x.n, x.k)
		}
	}
	if r.Kept != "" {
		fmt.Fprintf(w, "  logs kept in %s\n", r.Kept)
	}
	if len(r.Violations) == 0 {
		fmt.Fprintln(w, "  checks: all passed")
		return
	}
	fmt.Fprintf(w, "  checks: %d VIOLATIONS\n", len(r.Violations))
	for _, v := range summarize(r.Violations, 20) {
		fmt.Fprintln(w, "   ", v)
	}
}

// summarize lists at most per violations of each check, and how many more.
func summarize(vs []Violation, per int) []string {
	n := map[string]int{}
	var out []string
	for _, v := range vs {
		n[v.Check]++
		if n[v.Check] <= per {
			out = append(out, v.String())
		}
	}
	for c, k := range n {
		if k > per {
			out = append(out, fmt.Sprintf("[%s] ... and %d more", c, k-per))
		}
	}
	return out
}

// proc is one worker process.
type proc struct {
	id     string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{}
	paused bool
}

// run is one chaos run in progress.
type run struct {
	o      Options
	rep    *Report
	store  *storage.Store // the store itself: corruption and checks
	srv    *miniotest.Server
	base   WorkerOptions
	env    []string
	exe    string
	logDir string
	tmp    string

	mu        sync.Mutex
	procs     map[int]*proc // by slot
	gens      map[int]int
	corrupted map[string][]byte
	pauses    sync.WaitGroup
	endPauses chan struct{}
	log       *slog.Logger
}

// Run performs one chaos run: setup, the chaos window, the drain, the
// checks. An error means the run could not be made (setup); violations
// are in the Report.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	if o.Workers < 1 || o.Jobs < 1 || o.Agents < 1 || o.Slots < 1 {
		return nil, errors.New("workers, jobs, agents and slots must be at least 1")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	r := &run{o: o, rep: &Report{Options: o, Jobs: o.Jobs}, procs: map[int]*proc{}, gens: map[int]int{},
		corrupted: map[string][]byte{}, endPauses: make(chan struct{}),
		log: slog.New(slog.NewTextHandler(o.Log, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	begin := time.Now()
	if r.exe, err = os.Executable(); err != nil {
		return nil, err
	}
	if r.tmp, err = os.MkdirTemp("", "conveyor-chaos-"); err != nil {
		return nil, err
	}
	// The temporary directory stays for a look when the report kept it
	// (violations); registered first, so it outlives the store's cleanup.
	defer func() {
		if r.rep.Kept == "" {
			_ = os.RemoveAll(r.tmp)
		}
	}()
	q, cleanup, err := r.setup(ctx)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	plan := plannedJobs(o)
	if err := r.startWorkers(); err != nil {
		return nil, err
	}
	enqViolations := r.scenario(ctx, q, plan)
	r.drain(ctx, plan)
	if err := r.report(ctx, plan, enqViolations); err != nil {
		return nil, err
	}
	r.rep.Total = time.Since(begin)
	return r.rep, nil
}

// setup makes the log directory, opens the store and the gateway's queue;
// cleanup closes the store.
func (r *run) setup(ctx context.Context) (q *jobqueue.Queue, cleanup func(), err error) {
	r.logDir = r.o.LogDir
	if r.logDir == "" {
		r.logDir = filepath.Join(r.tmp, "logs")
	}
	if err := os.MkdirAll(r.logDir, 0o755); err != nil {
		return nil, nil, err
	}
	if cleanup, err = r.openStore(ctx); err != nil {
		return nil, nil, err
	}
	// The parent enqueues as the gateway does, through the same outage as
	// the workers; it corrupts and checks through the store itself.
	gw := r.store
	if r.base.OutageFile != "" {
		gw = storage.New(&outageStore{Store: r.store, marker: r.base.OutageFile})
	}
	q, err = jobqueue.New(queueConfig(gw, "chaos-gateway", r.o.Lease, r.o.Step, slog.New(slog.DiscardHandler)))
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return q, cleanup, nil
}

// startWorkers starts one worker process per slot, or none.
func (r *run) startWorkers() error {
	for slot := range r.o.Workers {
		if err := r.startWorker(slot); err != nil {
			r.stopWorkers()
			return err
		}
	}
	r.log.Info("chaos: workers started", "workers", r.o.Workers, "store", r.o.Store, "logs", r.logDir)
	return nil
}

// scenario enqueues the plan during the chaos window and returns the
// enqueue's violations once both end.
func (r *run) scenario(ctx context.Context, q *jobqueue.Queue, plan []Planned) []Violation {
	// Enqueue the jobs over the first 70 % of the window, so that faults
	// meet work in flight.
	enqueued := make(chan []Violation, 1)
	chaosCtx, stopChaos := context.WithCancel(ctx)
	go func() { enqueued <- r.enqueue(ctx, q, plan) }()
	start := time.Now()
	r.chaos(chaosCtx, time.Now().Add(r.o.Duration))
	stopChaos()
	close(r.endPauses)
	r.pauses.Wait()
	r.rep.Chaos = time.Since(start)
	return <-enqueued
}

// report stops the workers, sweeps, checks the final state and fills the
// Report; it keeps the logs (Kept) when there are violations and no
// directory was given.
func (r *run) report(ctx context.Context, plan []Planned, enqViolations []Violation) error {
	var vs []Violation
	vs = append(vs, enqViolations...)
	vs = append(vs, r.stopWorkers()...)

	sweepVs, err := r.finalSweep(ctx)
	if err != nil {
		return err
	}
	vs = append(vs, sweepVs...)

	st, err := r.finalState(ctx, plan)
	if err != nil {
		return err
	}
	vs = append(vs, Check(st)...)
	r.rep.Violations = vs
	r.fill(st)
	r.rep.WorkerLog = countLogs(r.logDir)
	if len(vs) > 0 && r.o.LogDir == "" && r.o.Dir == "" {
		r.rep.Kept = r.logDir
	}
	return nil
}

// drain waits until every job settles, or the bounded wait ends.
func (r *run) drain(ctx context.Context, plan []Planned) {
	o := r.o
	drainStart := time.Now()
	deadline := drainStart.Add(o.Drain)
	poll := 250 * time.Millisecond
	if o.Jobs > 300 {
		poll = time.Second
	}
	for {
		st, err := observe(ctx, r.store, plan, false)
		if err == nil && st.settled() {
			r.rep.Settled = true
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(poll)
	}
	r.rep.Drained = time.Since(drainStart)
	r.log.Info("chaos: drain over", "settled", r.rep.Settled, "after", r.rep.Drained)
}

// finalSweep makes a last sweep, as the workers' periodic ones do: it
// re-emits the audit of writes whose writer died before auditing them, and
// rescues what is left. An error means the sweep could not be made.
func (r *run) finalSweep(ctx context.Context) ([]Violation, error) {
	o := r.o
	var vs []Violation
	sq, err := jobqueue.New(queueConfig(r.store, "chaos-checker", o.Lease, o.Step, slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if _, err := sq.Sweep(sctx); err != nil {
		vs = append(vs, Violation{Check: CheckSweep, Subject: "final sweep", Detail: err.Error()})
	}
	// The sweep reads only work in flight (issue 12); a finished job chaos
	// corrupted is found when something reads it. The checker reads every
	// job, as an operator's audit would, and so quarantines such poison.
	for _, err := range sq.List(sctx, lifecycle.ActorAdmin) {
		if err != nil {
			vs = append(vs, Violation{Check: CheckSweep, Subject: "final read of every job", Detail: err.Error()})
			break
		}
	}
	cancel()
	return vs, nil
}

// finalState observes the final state, with what chaos corrupted.
func (r *run) finalState(ctx context.Context, plan []Planned) (*State, error) {
	st, err := observe(ctx, r.store, plan, true)
	if err != nil {
		return nil, fmt.Errorf("reading the final state: %w", err)
	}
	r.mu.Lock()
	for k, g := range r.corrupted {
		st.Corrupted[k], st.Garbage[k] = true, g
		if cur, _, err := r.store.Get(ctx, k); err == nil {
			st.Current[k] = cur
		}
	}
	r.mu.Unlock()
	return st, nil
}

// fill counts the outcome into the report.
func (r *run) fill(st *State) {
	rep := r.rep
	rep.QuarantineRecords = len(st.Quarantine)
	rep.Artifacts = len(st.Artifacts)
	for _, p := range st.Plan {
		rec := st.Records[p.JobID]
		switch {
		case rec.Job != nil && rec.Job.Status == lifecycle.JobComplete:
			rep.Complete++
		case rec.Job != nil && rec.Job.Status == lifecycle.JobDead:
			rep.Dead++
			why := ""
			if rec.Job.Error != nil {
				why = *rec.Job.Error
			}
			rep.DeadWhy = append(rep.DeadWhy, fmt.Sprintf("%s: %s in %s: %s", p.JobID, rec.Job.ErrorCode, rec.Job.FailedStep, why))
		case !rec.Present && st.quarantined(p.JobID):
			rep.Quarantined++
		default:
			rep.Open++
		}
		if rec.Job != nil {
			rep.Attempts += rec.Job.Attempt
		}
	}
	for _, a := range st.Artifacts {
		rec := st.Records[a.JobID]
		if p, ok := parseProducer(a.Content); ok && rec.Job != nil && rec.Job.Status == lifecycle.JobComplete && p.Attempt != rec.Job.Attempt {
			rep.ReusedArtifacts++
		}
	}
}

// plannedJobs are the jobs of a run.
func plannedJobs(o Options) []Planned {
	p := make([]Planned, o.Jobs)
	for i := range p {
		p[i] = Planned{
			JobID:     fmt.Sprintf("job-%05d", i),
			RunID:     fmt.Sprintf("run_2026-02-24_c%05d", i),
			AgentSlug: fmt.Sprintf("agent-%02d", i%o.Agents),
		}
	}
	return p
}

func (r *run) openStore(ctx context.Context) (func(), error) {
	o := r.o
	r.base = WorkerOptions{Store: o.Store, Lease: o.Lease, Step: o.Step, Poll: o.Poll, Sweep: o.Sweep,
		Slots: o.Slots, FailRate: o.FailRate, HangRate: o.HangRate, Seed: o.Seed, Work: o.Work, HangFor: o.HangFor}
	r.env = append(os.Environ(), workerEnv+"=1")
	switch o.Store {
	case "file":
		dir := o.Dir
		if dir == "" {
			dir = filepath.Join(r.tmp, "store")
		}
		s, err := filestore.New(dir)
		if err != nil {
			return nil, err
		}
		r.store, r.base.Dir = s, dir
		if o.Outage {
			r.base.OutageFile = filepath.Join(r.tmp, "outage")
		}
		return func() {}, nil
	case "sqlite":
		dir := o.Dir
		if dir == "" {
			dir = filepath.Join(r.tmp, "store")
		}
		s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: filepath.Join(dir, sqliteFile)})
		if err != nil {
			return nil, err
		}
		r.store, r.base.Dir = s, dir
		if o.Outage {
			r.base.OutageFile = filepath.Join(r.tmp, "outage")
		}
		return func() { _ = s.Close() }, nil
	case "minio":
		bin, err := miniotest.FindBinary()
		if err != nil {
			return nil, err
		}
		srv, err := miniotest.Start(ctx, bin, miniotest.DataParent())
		if err != nil {
			return nil, err
		}
		bkt, err := srv.CreateBucket(ctx)
		if err != nil {
			_ = srv.Stop()
			return nil, err
		}
		prefix := "chaos-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/"
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		s, err := s3store.NewWithClient(srv.Client(&http.Client{Transport: tr, Timeout: 10 * time.Second}), bkt, prefix)
		if err != nil {
			_ = srv.Stop()
			return nil, err
		}
		r.store, r.srv = s, srv
		r.base.S3Endpoint, r.base.S3Bucket, r.base.S3Prefix, r.base.S3Region = srv.Endpoint, bkt, prefix, srv.Region
		r.env = append(r.env, envS3Access+"="+srv.AccessKey, envS3Secret+"="+srv.SecretKey)
		return func() {
			tr.CloseIdleConnections()
			_ = srv.Stop()
		}, nil
	}
	return nil, fmt.Errorf("unknown store %q (want file, sqlite or minio)", o.Store)
}

// startWorker starts the next generation of the worker in slot.
func (r *run) startWorker(slot int) error {
	r.mu.Lock()
	gen := r.gens[slot]
	r.gens[slot]++
	r.mu.Unlock()
	w := r.base
	w.ID = fmt.Sprintf("w%d-g%d", slot, gen)
	w.Seed = r.o.Seed*1000 + uint64(slot*100+gen)
	logf, err := os.Create(filepath.Join(r.logDir, w.ID+".log"))
	if err != nil {
		return err
	}
	defer logf.Close() // the child keeps its own descriptor
	cmd := exec.Command(r.exe, w.args()...)
	cmd.Env = r.env
	cmd.Stdout, cmd.Stderr = logf, logf // *os.File: no copying goroutines
	dieWithParent(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &proc{id: w.ID, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	r.mu.Lock()
	r.procs[slot] = p
	r.mu.Unlock()
	return nil
}

// stopWorkers asks every worker to stop (SIGTERM, stdin closed) and waits
// Grace for each; one that does not stop is killed and reported.
func (r *run) stopWorkers() []Violation {
	r.mu.Lock()
	procs := make(map[int]*proc, len(r.procs))
	for k, v := range r.procs {
		procs[k] = v
	}
	r.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.stdin.Close()
	}
	var vs []Violation
	limit := time.After(r.o.Grace)
	for slot := range r.o.Workers {
		p := procs[slot]
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			continue
		case <-limit:
		}
		select {
		case <-p.done:
			continue
		default:
		}
		vs = append(vs, Violation{Check: CheckShutdown, Subject: p.id,
			Detail: fmt.Sprintf("still running %s after SIGTERM; killed", r.o.Grace)})
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return vs
}

// enqueue enqueues plan over the first 70 % of the chaos window, waiting
// out store errors (an outage) for each job.
func (r *run) enqueue(ctx context.Context, q *jobqueue.Queue, plan []Planned) []Violation {
	gap := time.Duration(float64(r.o.Duration) * 0.7 / float64(len(plan)))
	start := time.Now()
	var vs []Violation
	for i, p := range plan {
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			time.Sleep(d)
		}
		for try := 0; ; try++ {
			_, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: p.JobID, RunID: p.RunID,
				JobType: lifecycle.JobBrief, AgentSlug: p.AgentSlug})
			if err == nil || errors.Is(err, lifecycle.ErrJobExists) {
				break // exists: an earlier try landed its record
			}
			if ctx.Err() != nil || try == 600 {
				vs = append(vs, Violation{Check: CheckEnqueue, Subject: p.JobID, Detail: err.Error()})
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return vs
}

// chaos injects faults until the deadline.
func (r *run) chaos(ctx context.Context, until time.Time) {
	o := r.o
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	var kinds []func(context.Context, *rand.Rand)
	if o.Kill {
		kinds = append(kinds, r.kill)
	}
	if o.Pause {
		kinds = append(kinds, r.pause)
	}
	if o.Corrupt {
		kinds = append(kinds, r.corrupt)
	}
	if o.Outage {
		kinds = append(kinds, r.outage)
	}
	for {
		gap := time.Duration(float64(o.Interval) * (0.5 + rng.Float64()))
		if time.Now().Add(gap).After(until) {
			if d := time.Until(until); d > 0 {
				sleepCtx(ctx, d)
			}
			return
		}
		if !sleepCtx(ctx, gap) {
			return
		}
		if len(kinds) > 0 {
			kinds[rng.IntN(len(kinds))](ctx, rng)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// pick returns a random running, not paused worker.
func (r *run) pick(rng *rand.Rand) (int, *proc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var slots []int
	for s, p := range r.procs {
		if !p.paused {
			slots = append(slots, s)
		}
	}
	if len(slots) == 0 {
		return -1, nil
	}
	sort.Ints(slots)
	s := slots[rng.IntN(len(slots))]
	return s, r.procs[s]
}

// kill sends SIGKILL to a worker (mid-job, lease and all) and starts a new
// one in its place.
func (r *run) kill(_ context.Context, rng *rand.Rand) {
	slot, p := r.pick(rng)
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	r.rep.Kills++
	r.log.Info("chaos: killed", "worker", p.id)
	if err := r.startWorker(slot); err != nil {
		r.log.Error("chaos: restarting a worker", "err", err)
	}
}

// pause stops a worker with SIGSTOP for 1.5 to 2.5 lease lifetimes, then
// continues it: the paused writer that wakes up after its job was taken
// over. One worker is paused at a time.
func (r *run) pause(_ context.Context, rng *rand.Rand) {
	r.mu.Lock()
	for _, p := range r.procs {
		if p.paused {
			r.mu.Unlock()
			return
		}
	}
	r.mu.Unlock()
	_, p := r.pick(rng)
	if p == nil || p.cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return
	}
	r.mu.Lock()
	p.paused = true
	r.mu.Unlock()
	r.rep.Pauses++
	d := time.Duration(float64(r.o.Lease) * (1.5 + rng.Float64()))
	r.log.Info("chaos: paused", "worker", p.id, "for", d)
	r.pauses.Add(1)
	go func() {
		defer r.pauses.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.endPauses:
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		r.mu.Lock()
		p.paused = false
		r.mu.Unlock()
	}()
}

// garbage is what a corrupted record holds: bytes that are not JSON, JSON
// cut short, JSON of the wrong shape, or a job with a state no machine
// knows.
func garbage(rng *rand.Rand, jobID string) []byte {
	switch rng.IntN(4) {
	case 0:
		b := make([]byte, 16+rng.IntN(48))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	case 1:
		return []byte(`{"job_id":"` + jobID + `","status":"QUEU`)
	case 2:
		return []byte(`["not","a","record"]`)
	default:
		return []byte(`{"job_id":"` + jobID + `","status":"EXPLODED","attempt":-1,"max_attempts":3,"epoch":"x"}`)
	}
}

// corrupt overwrites a random job record (two times in three) or agent
// lock with garbage, unconditionally, as a buggy tool or a bad disk would.
func (r *run) corrupt(ctx context.Context, rng *rand.Rand) {
	var key, id string
	if rng.IntN(3) < 2 {
		n := rng.IntN(r.o.Jobs)
		id = fmt.Sprintf("job-%05d", n)
		key, _ = layout.JobKey(id)
	} else {
		key, _ = layout.AgentLockKey(fmt.Sprintf("agent-%02d", rng.IntN(r.o.Agents)))
	}
	if _, _, err := r.store.Get(ctx, key); err != nil {
		return // not there yet (or the store is failing): nothing to corrupt
	}
	g := garbage(rng, id)
	if _, err := r.store.Put(ctx, key, g, storage.Condition{}); err != nil {
		r.log.Warn("chaos: corrupting", "key", key, "err", err)
		return
	}
	r.mu.Lock()
	r.corrupted[key] = g
	r.mu.Unlock()
	r.rep.Corruptions++
	r.log.Info("chaos: corrupted", "key", key)
}

// outage stops the store for OutageFor: MinIO is halted and resumed on
// the same port and data; the filestore's processes see every call fail
// (the marker file of outageStore).
func (r *run) outage(ctx context.Context, _ *rand.Rand) {
	r.rep.Outages++
	start := time.Now()
	if r.srv != nil {
		if err := r.srv.Halt(false); err != nil {
			r.log.Error("chaos: halting MinIO", "err", err)
		}
		sleepCtx(ctx, r.o.OutageFor)
		if err := r.srv.Resume(context.WithoutCancel(ctx)); err != nil {
			r.log.Error("chaos: resuming MinIO", "err", err)
		}
	} else {
		if err := os.WriteFile(r.base.OutageFile, nil, 0o644); err != nil {
			r.log.Error("chaos: starting an outage", "err", err)
		}
		sleepCtx(ctx, r.o.OutageFor)
		_ = os.Remove(r.base.OutageFile)
	}
	r.log.Info("chaos: store outage", "for", time.Since(start))
}

// countLogs counts the workers' log lines by message.
func countLogs(dir string) map[string]int {
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			out[logMsg(line)]++
		}
	}
	return out
}

// logMsg is a log line's message and error, with the ids of jobs,
// agents, workers and processes replaced by N, so that like lines count
// together.
func logMsg(line string) string {
	msg := logAttr(line, "msg")
	if msg == "" {
		msg = strings.TrimSpace(line)
	}
	if err := logAttr(line, "err"); err != "" {
		msg += ": " + err
	}
	msg = idPattern.ReplaceAllString(msg, "${1}${2}${3}${4}${5}N")
	if len(msg) > 160 {
		msg = msg[:160] + "..."
	}
	return msg
}

var idPattern = regexp.MustCompile(`(job-)[0-9]+|(agent-)[0-9]+|(art-)[-0-9a-f]+|\b(w)[0-9]+-g[0-9]+|(epoch )[0-9]+`)

// logAttr is the value of attribute name in a line of slog's text format.
func logAttr(line, name string) string {
	i := strings.Index(line, " "+name+"=")
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	if strings.HasPrefix(rest, `"`) {
		if s, err := strconv.QuotedPrefix(rest); err == nil {
			u, _ := strconv.Unquote(s)
			return u
		}
	}
	if j := strings.IndexByte(rest, ' '); j >= 0 {
		return rest[:j]
	}
	return strings.TrimSpace(rest)
}
