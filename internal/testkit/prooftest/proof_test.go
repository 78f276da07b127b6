package prooftest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/jobaudit"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Package prooftest_test holds the proof of the job queue (issue 5 item 7)
// in a test binary of its own, so that its minute on MinIO does not slow
// the unit tests of package jobqueue.
//
// The proof: workers (goroutines, and separate processes
// on MinIO) sharing one store run 1,000 jobs with injected faults: handler
// errors (429, 503, plain), context-assembly timeouts, artifact write
// errors, and killed workers. Every job must end COMPLETE or DEAD, every
// COMPLETE job must have exactly its one finalized artifact, and replaying
// the audit log must give the final states through legal transitions only.

const workerProcessEnv = "CONVEYOR_JOBQUEUE_WORKER"

var env teststores.Env

func TestMain(m *testing.M) {
	if os.Getenv(workerProcessEnv) != "" {
		os.Exit(workerProcess())
	}
	goleak.VerifyTestMain(env.Wrap(m))
}

func spec(id, agent string) jobqueue.NewJob {
	return jobqueue.NewJob{JobID: id, RunID: "run_2026-02-24_abc123", JobType: lifecycle.JobBrief, AgentSlug: agent}
}

func newQueue(t testing.TB, s *storage.Store, c clock.Clock, mod ...func(*jobqueue.Config)) *jobqueue.Queue {
	t.Helper()
	cfg := jobqueue.Config{Store: s, Clock: c, Node: "test", Logger: slog.New(slog.DiscardHandler)}
	for _, m := range mod {
		m(&cfg)
	}
	q, err := jobqueue.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// proofConfig is the timing of the proof: real time, scaled down.
type proofConfig struct {
	lease, step, poll time.Duration
	backoff           []time.Duration
}

func (p proofConfig) apply(c *jobqueue.Config) {
	c.LeaseTTL, c.StepTimeout, c.Backoff = p.lease, p.step, p.backoff
}

// faultyHandlers fail about one attempt in six: a context-assembly timeout
// (the handler hangs past StepTimeout), 429, 503 or a plain error.
func faultyHandlers(seed uint64) jobqueue.Handlers {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	roll := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64()
	}
	return jobqueue.Handlers{
		AssembleContext: func(ctx context.Context, job lifecycle.Job) (json.RawMessage, error) {
			if roll() < 0.04 {
				<-ctx.Done() // hang until the step timeout
				return nil, ctx.Err()
			}
			return json.RawMessage(`{"ok":true}`), nil
		},
		CallNotebookLM: func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
			switch r := roll(); {
			case r < 0.04:
				return lifecycle.JobOutput{}, &jobqueue.StatusError{Code: 429}
			case r < 0.08:
				return lifecycle.JobOutput{}, &jobqueue.StatusError{Code: 503}
			case r < 0.12:
				return lifecycle.JobOutput{}, errors.New("injected handler error")
			}
			return lifecycle.JobOutput{Content: json.RawMessage(fmt.Sprintf(
				`{"title":"Brief %s","body":"b","entity_map":{},"word_count":1}`, job.JobID))}, nil
		},
	}
}

// faultyStore fails a share of artifact writes, and every call once killed
// (a worker cut off from the store is dead to everyone else).
type faultyStore struct {
	driver.Store
	who       string   // the worker, for the history
	hist      *history // nil: none kept
	killed    atomic.Bool
	mu        sync.Mutex
	rng       *rand.Rand
	writeFail float64
}

var errKilled = errors.New("injected: worker killed")

func (f *faultyStore) fail(key string) error {
	if f.killed.Load() {
		return errKilled
	}
	if strings.HasPrefix(key, "projects/") {
		f.mu.Lock()
		r := f.rng.Float64()
		f.mu.Unlock()
		if r < f.writeFail {
			return &storage.OpError{Op: "put", Key: key, Cause: errors.New("injected artifact write error")}
		}
	}
	return nil
}

func (f *faultyStore) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if f.killed.Load() {
		return nil, "", errKilled
	}
	return f.Store.Get(ctx, key)
}

func (f *faultyStore) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if err := f.fail(key); err != nil {
		return "", err
	}
	v, err := f.Store.Put(ctx, key, value, cond)
	if err == nil {
		f.hist.add(f.who, "put", key, v, value)
	}
	return v, err
}

func (f *faultyStore) Delete(ctx context.Context, key string, cond storage.Condition) error {
	if f.killed.Load() {
		return errKilled
	}
	err := f.Store.Delete(ctx, key, cond)
	if err == nil {
		f.hist.add(f.who, "delete", key, "", nil)
	}
	return err
}

// Commit forwards to the store under it, so the queue's commits (where it
// commits) are proved too; killed, it fails whole, as a dead worker's.
func (f *faultyStore) Commit(ctx context.Context, ws []driver.Write) ([]storage.Version, error) {
	c, ok := f.Store.(driver.Committer)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	for _, w := range ws {
		if err := f.fail(w.Key); err != nil {
			return nil, err
		}
	}
	vs, err := c.Commit(ctx, ws)
	if err == nil {
		for i, w := range ws {
			op := "put"
			if w.Delete {
				op = "delete"
			}
			f.hist.add(f.who, op, w.Key, vs[i], w.Value)
		}
	}
	return vs, err
}

// Unwrap lets the queue see what the store under it can do.
func (f *faultyStore) Unwrap() driver.Store { return f.Store }

// history keeps every write the workers made to the queue's own keys
// (locks, lanes, jobs), so that a stall can be told as the sequence of
// writes that led to it.
type history struct {
	mu     sync.Mutex
	writes []write
}

type write struct {
	at      time.Time
	who, op string
	key     string
	version storage.Version
	value   string
}

func (h *history) add(who, op, key string, v storage.Version, value []byte) {
	if h == nil || !(strings.HasPrefix(key, layout.QueuePrefix) || strings.HasPrefix(key, "jobs/")) {
		return
	}
	h.mu.Lock()
	h.writes = append(h.writes, write{time.Now(), who, op, key, v, string(value)})
	h.mu.Unlock()
}

// of logs the writes whose key contains any of subs, in order.
func (h *history) of(t *testing.T, subs ...string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.writes {
		for _, sub := range subs {
			if strings.Contains(w.key, sub) {
				t.Logf("%s %s %s %s %s %s", w.at.Format("05.000000"), w.who, w.op, w.key, w.version, w.value)
				break
			}
		}
	}
}

// runProof enqueues n jobs over agents agents, runs them with workers
// in-process workers of slots slots each (one of which is killed midway)
// plus whatever extra does (other processes), and checks the outcome.
func runProof(t *testing.T, s *storage.Store, n, agents, workers, slots int, pc proofConfig, extra func(ctx context.Context, kill func())) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hist := &history{}
	// The test's own queue (enqueues, sweeps) writes through a store that
	// never fails, for the history.
	q := newQueue(t, storage.New(&faultyStore{Store: s, who: "test", hist: hist, rng: rand.New(rand.NewPCG(1, 1))}), clock.Real(), pc.apply)
	start := time.Now()
	for i := range n {
		j := spec(fmt.Sprintf("job-%04d", i), fmt.Sprintf("agent-%02d", i%agents))
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, j); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var overlap atomic.Int32
	kill := startProofWorkers(ctx, t, s, hist, &wg, &overlap, workers, slots, pc)
	if extra != nil {
		extra(ctx, kill)
	} else {
		time.AfterFunc(50*time.Millisecond, kill)
	}
	final := waitAllEnded(ctx, t, q, s, hist, n, start)
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	// A final sweep re-emits the audit of writes whose writer died before
	// auditing them (what workers' periodic sweeps do).
	if _, err := newQueue(t, s, clock.Real()).Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	complete, dead, attempts := checkEnds(t, q, final)
	arts := checkArtifacts(t, q)
	checkReplay(t, s, final, start, n)
	if overlap.Load() > 0 {
		t.Logf("note: %d handler calls overlapped another of the same agent (only possible after a lease was lost)", overlap.Load())
	}
	if complete == 0 || dead+complete != n {
		t.Fatalf("complete %d dead %d of %d", complete, dead, n)
	}
	t.Logf("%d jobs in %s: %d COMPLETE, %d DEAD, %d attempts, %d artifacts (%d of them for DEAD jobs)",
		n, elapsed.Round(time.Millisecond), complete, dead, attempts, arts, arts-complete)
}

// startProofWorkers starts the proof's Workers, each over a store that
// fails a share of its writes, counting in overlap the handler calls that
// ran beside another of the same agent. kill cuts the first Worker off
// from the store.
func startProofWorkers(ctx context.Context, t *testing.T, s *storage.Store, hist *history, wg *sync.WaitGroup, overlap *atomic.Int32, workers, slots int, pc proofConfig) (kill func()) {
	var victims []*faultyStore
	var runningPerAgent sync.Map // agent → *atomic.Int32: handler executions at once
	for w := range workers {
		fs := &faultyStore{Store: s, who: fmt.Sprintf("w%d", w), hist: hist, rng: rand.New(rand.NewPCG(uint64(w), 7)), writeFail: 0.03}
		wq := newQueue(t, storage.New(fs), clock.Real(), pc.apply, func(c *jobqueue.Config) { c.Node = fmt.Sprintf("node-%d", w) })
		h := faultyHandlers(uint64(w) + 100)
		inner := h.CallNotebookLM
		h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
			v, _ := runningPerAgent.LoadOrStore(job.AgentSlug, new(atomic.Int32))
			c := v.(*atomic.Int32)
			if c.Add(1) > 1 {
				overlap.Add(1)
			}
			defer c.Add(-1)
			return inner(ctx, job, snap)
		}
		if w == 0 {
			victims = append(victims, fs)
		}
		worker := &jobqueue.Worker{Queue: wq, ID: fmt.Sprintf("w%d", w), Handlers: h, Slots: slots, PollInterval: pc.poll, SweepInterval: -1}
		wg.Go(func() { _ = worker.Run(ctx) })
	}
	return func() {
		for _, v := range victims {
			v.killed.Store(true)
		}
	}
}

// waitAllEnded waits until every job is COMPLETE or DEAD, sweeping now and
// then as a worker would, and returns the jobs as they ended. A job that
// never ends shows as a stall: no job ended for stallLimit. A busy machine
// (CI running every package's tests at once) only makes the proof slower,
// so the wait is bounded by the stall and by totalLimit, not by a fixed
// time that a loaded machine overruns while jobs are still ending.
func waitAllEnded(ctx context.Context, t *testing.T, q *jobqueue.Queue, s *storage.Store, hist *history, n int, start time.Time) map[string]lifecycle.Job {
	const stallLimit, totalLimit = 90 * time.Second, 6 * time.Minute
	// The first look lists every job; later ones re-read only the jobs
	// still open, so the wait adds little load of its own (on MinIO under
	// load, listing 1,000 jobs twice a second was most of the test's time).
	lastProgress, best := time.Now(), n+1
	final := map[string]lifecycle.Job{}
	for j, err := range q.List(ctx, lifecycle.ActorOrchestration) {
		if err != nil {
			t.Fatal(err)
		}
		final[j.JobID] = j
	}
	if len(final) != n {
		t.Fatalf("%d jobs listed, %d enqueued", len(final), n)
	}
	sweeps := 0
	for {
		open := 0
		for id, j := range final {
			if j.Status == lifecycle.JobComplete || j.Status == lifecycle.JobDead {
				continue
			}
			j, err := q.Job(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			final[id] = j
			if j.Status != lifecycle.JobComplete && j.Status != lifecycle.JobDead {
				open++
			}
		}
		if open == 0 {
			return final
		}
		if open < best {
			best, lastProgress = open, time.Now()
		}
		if stalled := time.Since(lastProgress); stalled > stallLimit || time.Since(start) > totalLimit {
			dumpOpen(t, s, final, hist)
			t.Fatalf("%d of %d jobs still open after %s, none ended in the last %s", open, n, time.Since(start).Round(time.Second), stalled.Round(time.Second))
		}
		if sweeps++; sweeps%10 == 0 {
			if _, err := q.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkEnds checks each ended job: a COMPLETE one has its one finalized
// artifact, a DEAD one used all its attempts.
func checkEnds(t *testing.T, q *jobqueue.Queue, final map[string]lifecycle.Job) (complete, dead, attempts int) {
	bg := context.Background()
	for id, j := range final {
		attempts += j.Attempt
		switch j.Status {
		case lifecycle.JobComplete:
			complete++
			if j.ArtifactID != artifact.IDForJob(id) {
				t.Errorf("%s: artifact_id %q", id, j.ArtifactID)
			}
			a, err := q.Artifacts().Get(bg, lifecycle.ActorOrchestration, lifecycle.DefaultProject, j.ArtifactID)
			if err != nil || !a.Finalized || a.JobID != id {
				t.Errorf("%s: artifact %+v %v", id, a, err)
			}
		case lifecycle.JobDead:
			dead++
			if j.Attempt != j.MaxAttempts {
				t.Errorf("%s: DEAD after %d attempts", id, j.Attempt)
			}
		}
	}
	return complete, dead, attempts
}

// checkArtifacts checks one artifact per job at most: every artifact
// belongs to a distinct job, and its id is that job's. It returns how
// many there are.
func checkArtifacts(t *testing.T, q *jobqueue.Queue) (arts int) {
	seen := map[string]bool{}
	for a, err := range q.Artifacts().List(context.Background(), lifecycle.ActorOrchestration, lifecycle.DefaultProject) {
		if err != nil {
			t.Fatal(err)
		}
		arts++
		if seen[a.JobID] || a.ArtifactID != artifact.IDForJob(a.JobID) || !a.Finalized {
			t.Errorf("artifact %s of job %s: duplicate or foreign", a.ArtifactID, a.JobID)
		}
		seen[a.JobID] = true
	}
	return arts
}

// checkReplay checks that the audit log replays every job to the status
// its record ended in.
func checkReplay(t *testing.T, s *storage.Store, final map[string]lifecycle.Job, start time.Time, n int) {
	states, err := jobaudit.Replay(context.Background(), s, start.Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != n {
		t.Fatalf("audit log replays %d jobs, want %d", len(states), n)
	}
	for id, j := range final {
		if states[id] != j.Status {
			t.Errorf("%s: audit replays to %s, record says %s", id, states[id], j.Status)
		}
	}
}

func TestProofMemstore(t *testing.T) {
	t.Parallel()
	s := env.Cases()[0].New(t)
	runProof(t, s, 1000, 40, 6, 4, proofConfig{lease: 200 * time.Millisecond, step: 30 * time.Millisecond, poll: 2 * time.Millisecond,
		backoff: []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}}, nil)
}

// TestProofMinIO runs the proof on a real MinIO with two worker processes
// besides the in-process ones; one process is killed with SIGKILL midway.
func TestProofMinIO(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("the MinIO proof takes a while; not run with -short")
	}
	srv, bkt := env.MinIO(t)
	prefix := "proof-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/"
	s := env.S3At(t, prefix)
	pc := proofConfig{lease: 2 * time.Second, step: 300 * time.Millisecond, poll: 20 * time.Millisecond,
		backoff: []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}}
	vars := []string{"W_ENDPOINT=" + srv.Endpoint, "W_ACCESS=" + srv.AccessKey, "W_SECRET=" + srv.SecretKey,
		"W_REGION=" + srv.Region, "W_BUCKET=" + bkt, "W_PREFIX=" + prefix}
	runProof(t, s, 1000, 50, 3, 4, pc, processWorkers(t, vars, pc))
}

// TestProofSQLite runs the proof on a SQLite file (the Worker's default
// store, whose Commit the queue uses for several writes of a job) shared
// with two worker processes; one process is killed with SIGKILL midway, as
// on MinIO.
func TestProofSQLite(t *testing.T) {
	// Not parallel: beside the MinIO proof, on two loaded cores, both took
	// over 3 minutes (leases lapsed, attempts nearly doubled); alone, 11 s
	// and 54 s.
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := sqlitestore.New(context.Background(), sqlitestore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	pc := proofConfig{lease: time.Second, step: 200 * time.Millisecond, poll: 10 * time.Millisecond,
		backoff: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}}
	// 500 jobs, not 1,000: under -race the SQLite engine (C translated to
	// Go) runs about ten times slower (1,000 jobs: 3.4 s without, 40 s
	// with; 500: 18 s).
	runProof(t, s, 500, 40, 3, 4, pc, processWorkers(t, []string{"W_SQLITE=" + path}, pc))
}

// processWorkers starts two worker processes on the store vars name and
// kills one with SIGKILL a second in, with the in-process worker kill.
func processWorkers(t *testing.T, vars []string, pc proofConfig) func(ctx context.Context, kill func()) {
	return func(ctx context.Context, kill func()) {
		var procs []*exec.Cmd
		var stdins []io.WriteCloser
		for i := range 2 {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(append(os.Environ(), workerProcessEnv+"=1", fmt.Sprintf("W_ID=proc%d", i),
				"W_LEASE="+pc.lease.String(), "W_STEP="+pc.step.String(), "W_POLL="+pc.poll.String()), vars...)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			procs = append(procs, cmd)
			stdins = append(stdins, stdin)
		}
		t.Cleanup(func() {
			for i, p := range procs {
				_ = stdins[i].Close()
				_ = p.Process.Signal(syscall.SIGTERM)
				_ = p.Wait()
			}
		})
		time.AfterFunc(time.Second, func() {
			kill()
			_ = procs[0].Process.Kill() // SIGKILL: dies mid-job, lease and all
		})
	}
}

// workerStore opens the store a worker process's environment names: a
// SQLite file (W_SQLITE) or a bucket of MinIO.
func workerStore() (driver.Store, func(), error) {
	if path := os.Getenv("W_SQLITE"); path != "" {
		d, err := sqlitestore.NewDriver(context.Background(), sqlitestore.Config{Path: path})
		if err != nil {
			return nil, nil, err
		}
		return d, func() { _ = d.(io.Closer).Close() }, nil
	}
	srv := &miniotest.Server{Endpoint: os.Getenv("W_ENDPOINT"), AccessKey: os.Getenv("W_ACCESS"),
		SecretKey: os.Getenv("W_SECRET"), Region: os.Getenv("W_REGION")}
	s, err := s3store.NewWithClient(srv.Client(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}), os.Getenv("W_BUCKET"), os.Getenv("W_PREFIX"))
	if err != nil {
		return nil, nil, err
	}
	return s, func() {}, nil
}

// workerProcess is the body of a worker process of TestProofMinIO and
// TestProofSQLite: it runs a Worker on the store until SIGTERM or its
// stdin closes.
func workerProcess() int {
	s, closeStore, err := workerStore()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer closeStore()
	lease, _ := time.ParseDuration(os.Getenv("W_LEASE"))
	step, _ := time.ParseDuration(os.Getenv("W_STEP"))
	poll, _ := time.ParseDuration(os.Getenv("W_POLL"))
	id := os.Getenv("W_ID")
	q, err := jobqueue.New(jobqueue.Config{Store: storage.New(&faultyStore{Store: s, rng: rand.New(rand.NewPCG(9, 9)), writeFail: 0.03}),
		LeaseTTL: lease, StepTimeout: step, Node: id, Logger: slog.New(slog.DiscardHandler),
		Backoff: []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin)) // parent gone or done
		stop()
	}()
	w := &jobqueue.Worker{Queue: q, ID: id, Handlers: faultyHandlers(uint64(len(id)) * 31), Slots: 4, PollInterval: poll, SweepInterval: -1}
	_ = w.Run(ctx)
	return 0
}

// dumpOpen logs, for every job not COMPLETE or DEAD, its stored record, its
// agent's lock and the agent's lane entries: the state a stuck job was left
// in (the invariant is "in its agent's lane or named by its agent's lock").
func dumpOpen(t *testing.T, s *storage.Store, final map[string]lifecycle.Job, hist *history) {
	t.Helper()
	ctx := context.Background()
	for id, j := range final {
		if j.Status == lifecycle.JobComplete || j.Status == lifecycle.JobDead {
			continue
		}
		jk, _ := layout.JobKey(id)
		rec, rv, err := s.Get(ctx, jk)
		t.Logf("open job %s (%s): record version %s err %v:\n%s", id, j.Status, rv, err, rec)
		lk, _ := layout.AgentLockKey(j.AgentSlug)
		lock, lv, err := s.Get(ctx, lk)
		t.Logf("agent %s lock version %s err %v:\n%s", j.AgentSlug, lv, err, lock)
		for key, err := range s.List(ctx, layout.LanesPrefix+j.AgentSlug+"/") {
			t.Logf("lane entry %s err %v", key, err)
		}
		t.Logf("the writes of job %s and of agent %s's lock and lane, in order:", id, j.AgentSlug)
		hist.of(t, jk, lk, layout.LanesPrefix+j.AgentSlug+"/")
	}
}
