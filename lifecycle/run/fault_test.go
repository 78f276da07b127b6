package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/procid"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// The fault suite of issue 10, run side. Each test failed on the Runner
// before it moved onto internal/core (see the commit that added it).

// clockStep is a step that takes d of the rig's (fake) time.
func clockStep(name string, clk clock.Clock, d time.Duration, started chan<- string) run.Step {
	return run.Step{Name: name, Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		if started != nil {
			started <- in.RunID
		}
		if err := activity.Sleep(ctx, clk, d); err != nil { // the runner's clock: idle meanwhile
			return run.StepOutput{}, err
		}
		return run.StepOutput{Summary: name, Files: map[string][]byte{"out.json": []byte(`"` + in.RunID + `"`)}}, nil
	}}
}

// TestFaultStoreOutage (fault 5): a store that refuses every call for 5 s
// in the middle of 20 runs fails no run and wedges nothing.
func TestFaultStoreOutage(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	fs := faultstore.New(g.store)
	started := make(chan string, 40)
	agent := run.Agent{Slug: "outage", Concurrency: 10,
		Steps: []run.Step{clockStep("work", g.clock, 2*time.Second, started), okStep("after")}}
	r, _ := g.with(storage.New(fs)).runner("a", nil, agent)
	var ids []string
	for range 20 {
		ids = append(ids, submit(t, r, agent.Slug))
	}
	for range 10 {
		<-started // ten runs hold the ten slots, in their first step
	}
	fs.Down()
	// Five seconds of fake time pass while every call is refused: the
	// steps end, and their writes meet the outage.
	// Each move waits until the runner waits on the clock again: the
	// retries met the outage and wait out their backoff.
	down := g.clock.Now()
	g.advanceUntil(100*time.Millisecond, 6*time.Second, func() bool {
		return g.clock.Now().Sub(down) >= 5*time.Second
	}, func() string { return "five seconds of outage did not pass" })
	if fs.Failed() < 10 {
		t.Fatalf("only %d calls met the outage", fs.Failed())
	}
	fs.Up()
	for _, id := range ids {
		st := g.wait(r, id, time.Second, 10*time.Minute)
		if st.Status != "completed" {
			t.Fatalf("run %s after the outage: %s %s", id, st.Status, deref(st.Error))
		}
	}
}

// TestFaultStoreOutageMinIO (fault 5 on S3): the MinIO server is killed
// for about 5 s while 20 runs are in flight, and restarted on the same
// port and data: every run completes.
func TestFaultStoreOutageMinIO(t *testing.T) {
	srv := miniotest.New(t)
	bucket, err := srv.CreateBucket(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	s, err := s3store.NewWithClient(srv.Client(&http.Client{Transport: tr}), bucket, "outage/")
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	started := make(chan string, 40)
	agent := run.Agent{Slug: "outage", Concurrency: 10, Steps: []run.Step{{Name: "work", Idempotent: true,
		Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			started <- in.RunID
			if testSelect(ctx, gate) {
				return run.StepOutput{Files: map[string][]byte{"out.json": []byte(`"done"`)}}, nil
			}
			return run.StepOutput{}, ctx.Err()
		}}, okStep("after")}}
	r, err := run.NewRunner(run.Config{Store: s, Owner: "a", Node: "test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, agent)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var ids []string
	for range 20 {
		ids = append(ids, submit(t, r, agent.Slug))
	}
	for range 10 {
		<-started
	}
	if err := srv.Halt(true); err != nil {
		t.Fatal(err)
	}
	close(gate) // the steps end into the outage
	outage := time.Now()
	<-time.After(5 * time.Second)
	if err := srv.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("MinIO down for %v", time.Since(outage).Round(time.Millisecond))
	wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer wcancel()
	for _, id := range ids {
		st, err := r.Wait(wctx, id)
		if err != nil || st.Status != "completed" {
			t.Fatalf("run %s after the outage: %s %s (%v)", id, st.Status, deref(st.Error), err)
		}
	}
}

// corruptions of a run's status.json, given the run's own document and the
// id of another run of the same agent.
var corruptions = []struct {
	name    string
	corrupt func(doc map[string]any, other string) []byte
}{
	{"undecodable", func(map[string]any, string) []byte { return []byte(`{"run_id": "run_`) }},
	{"unknown-status", func(doc map[string]any, _ string) []byte {
		doc["status"] = "sideways"
		b, _ := json.Marshal(doc)
		return b
	}},
	{"another-runs-id", func(doc map[string]any, other string) []byte {
		doc["run_id"] = other
		b, _ := json.Marshal(doc)
		return b
	}},
}

// TestFaultPoisonStatus (fault 6): a poison status.json of an executing run
// is quarantined; its slot and active entry are freed, so the agent's next
// run completes (also when the poison names that run); Wait on the poisoned
// run returns a *RunQuarantinedError; the poll stops reading it.
// faultStores are the stores the fault suite runs on: the poison records
// and late writers are the same faults on each.
var faultStores = []struct {
	name string
	new  func(t *testing.T) *storage.Store
}{
	{"memstore", func(t *testing.T) *storage.Store { return memStore(t) }},
	{"filestore", func(t *testing.T) *storage.Store {
		s, err := filestore.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"sqlite", func(t *testing.T) *storage.Store { return teststores.SQLite(t) }},
}

func TestFaultPoisonStatus(t *testing.T) {
	t.Parallel()
	for _, sc := range faultStores {
		for _, tt := range corruptions {
			t.Run(sc.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				testPoisonStatus(t, newRig(t, sc.new(t)), tt.corrupt)
			})
		}
	}
}

func testPoisonStatus(t *testing.T, g *rig, corrupt func(map[string]any, string) []byte) {
	var calls atomic.Int32
	inFirst := make(chan struct{})
	agent := run.Agent{Slug: "poisoned", Steps: []run.Step{{Name: "work",
		Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
			if calls.Add(1) == 1 { // the run to be poisoned holds the slot
				close(inFirst)
				<-ctx.Done()
				return run.StepOutput{}, ctx.Err()
			}
			return run.StepOutput{}, nil
		}}}}
	var logs *testlog.Buffer
	r, _ := g.runner("a", func(c *run.Config) { logs = capture(c) }, agent)
	bad := submit(t, r, agent.Slug)
	<-inFirst
	next := submit(t, r, agent.Slug) // waits for bad's slot
	key, _ := layout.RunStatusKey(agent.Slug, bad)
	var doc map[string]any
	readJSON(t, g.store, key, &doc)
	if _, err := g.store.Put(context.Background(), key, corrupt(doc, next), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.Wait(ctx, bad)
	var qe *lifecycle.QuarantinedError
	if !errors.Is(err, lifecycle.ErrCorrupt) || !errors.As(err, &qe) || qe.ID != bad {
		t.Fatalf("Wait on the poisoned run: %v, want a RunQuarantinedError", err)
	}
	if st := g.wait(r, next, time.Second, 2*time.Minute); st.Status != "completed" {
		t.Fatalf("the agent's next run: %s %s", st.Status, deref(st.Error))
	}
	var quarantined []string
	for q, err := range records.ListQuarantine(context.Background(), g.store) {
		if err != nil {
			t.Fatal(err)
		}
		quarantined = append(quarantined, q.Key)
	}
	if !slices.Contains(quarantined, key) || r.Quarantined() < 1 {
		t.Fatalf("quarantine holds %v (counted %d), want %s", quarantined, r.Quarantined(), key)
	}
	if !strings.Contains(logs.String(), `"msg":"record_quarantined"`) {
		t.Error("no record_quarantined log")
	}
	for k, err := range g.store.List(context.Background(), "index/active/") {
		if err == nil && strings.HasSuffix(k, "/"+bad) {
			t.Errorf("the poisoned run's active entry %s stayed", k)
		}
	}
	// And the poll no longer reads it. A poll that listed the run before
	// its quarantine, and the poisoned execution's own end, may still be
	// under way: wait until the runner is idle before counting.
	g.idle()
	before := len(logs.String())
	reads := strings.Count(logs.String(), bad)
	for range 10 {
		g.clock.Advance(time.Second)
		<-g.clock.WaitForTimers(1)
	}
	if again := strings.Count(logs.String(), bad); again != reads {
		t.Errorf("the poisoned run came up %d more times in the logs after quarantine:\n%s", again-reads, logs.String()[before:])
	}
}

// TestFaultStragglerCounted (fault 8): a step that ignores its context gets
// AGENT_TIMEOUT, its goroutine is counted, and Run returns within
// ShutdownGrace while it still runs.
func TestFaultStragglerCounted(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	release := make(chan struct{})
	inStep := make(chan struct{}, 1)
	agent := run.Agent{Slug: "stubborn", Steps: []run.Step{{Name: "hang", Timeout: time.Minute,
		Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
			inStep <- struct{}{}
			testWait(ctx, release) // ignores its context
			return run.StepOutput{}, nil
		}}}}
	r, stop := g.runner("a", func(c *run.Config) {
		c.StepRetries = -1
		c.ShutdownGrace = 50 * time.Millisecond
	}, agent)
	id := submit(t, r, agent.Slug)
	<-inStep
	st := g.wait(r, id, 10*time.Second, 5*time.Minute)
	if st.Status != "failed" || !strings.HasPrefix(deref(st.Error), "AGENT_TIMEOUT:") {
		t.Fatalf("run: %s %s", st.Status, deref(st.Error))
	}
	if live, total := r.Stragglers(); live != 1 || total != 1 {
		t.Fatalf("Stragglers = %d, %d; want 1 live of 1", live, total)
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within its shutdown grace while a straggler ran")
	}
	close(release)
	until(t, "the straggler to return", func() bool { live, _ := r.Stragglers(); return live == 0 })
}

// lateGate pauses one runner's store calls from the first write of a key
// matching match on (before it reaches the store), as if its process froze
// between confirming its lease and writing, and records which of its writes
// land after it thaws.
type lateGate struct {
	driver.Store
	match func(string) bool

	mu      sync.Mutex
	closed  chan struct{} // closed while open
	tripped chan struct{}
	thawed  bool
	late    []string
}

func newLateGate(s *storage.Store, match func(string) bool) *lateGate {
	g := &lateGate{Store: s, match: match, closed: make(chan struct{}), tripped: make(chan struct{})}
	close(g.closed)
	return g
}

func (g *lateGate) pass(ctx context.Context, key string, write bool) {
	g.mu.Lock()
	if write && g.match(key) && !g.thawed {
		select {
		case <-g.tripped:
		default:
			close(g.tripped)
			g.closed = make(chan struct{})
		}
	}
	ch := g.closed
	g.mu.Unlock()
	testWait(ctx, ch) // a frozen process: no work of the runners
}

func (g *lateGate) thaw() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.thawed = true
	close(g.closed)
}

func (g *lateGate) note(key string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.thawed && err == nil && !strings.HasPrefix(key, "audit/") {
		g.late = append(g.late, key)
	}
}

func (g *lateGate) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	g.pass(ctx, key, true)
	ver, err := g.Store.Put(ctx, key, v, c)
	g.note(key, err)
	return ver, err
}

func (g *lateGate) Delete(ctx context.Context, key string, c storage.Condition) error {
	g.pass(ctx, key, true)
	err := g.Store.Delete(ctx, key, c)
	g.note(key, err)
	return err
}

func (g *lateGate) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	g.pass(ctx, key, false)
	return g.Store.Get(ctx, key)
}

// TestFaultLateWriter (fault 3): runner a freezes right before it writes an
// output file (or manifest.json), after its lease check; its lease lapses,
// runner b takes the run over and completes it (or fails it); a wakes and
// its write must be refused: the files are b's. The case where b fails the
// run failed before the manifest was written at every end: a's manifest,
// claiming the run completed, was created after b had failed it.
func TestFaultLateWriter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		match  func(string) bool
		bFails bool
	}{
		{"output", func(k string) bool { return strings.Contains(k, "/output/") }, false},
		{"manifest", func(k string) bool { return strings.HasSuffix(k, "/manifest.json") }, false},
		{"manifest of a run b fails", func(k string) bool { return strings.HasSuffix(k, "/manifest.json") }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, nil)
			mk := func(owner string) run.Agent {
				return run.Agent{Slug: "late", Steps: []run.Step{{Name: "work", Idempotent: true,
					Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
						if owner == "b" && tt.bFails {
							return run.StepOutput{}, errors.New("b's upstream refuses")
						}
						return run.StepOutput{Summary: "by " + owner, Files: map[string][]byte{"result.json": []byte(`"` + owner + `"`)}}, nil
					}}}}
			}
			want := "completed"
			if tt.bFails {
				want = "failed"
			}
			gate := newLateGate(g.tracked(), tt.match)
			var logs *testlog.Buffer
			a, _ := g.around(storage.New(gate)).runner("a", func(c *run.Config) { logs = capture(c) }, mk("a"))
			id := submit(t, a, "late")
			<-gate.tripped
			thawed := false
			defer func() {
				if !thawed {
					gate.thaw()
				}
			}()
			b, _ := g.runner("b", nil, mk("b"))
			st := g.wait(b, id, 30*time.Second, 15*time.Minute)
			if st.Status != want || st.ResumeCount != 1 || st.Lease != nil {
				t.Fatalf("runner b: %+v", st)
			}
			thawed = true
			gate.thaw()
			until(t, "runner a to give the run up", func() bool {
				return strings.Contains(logs.String(), `"msg":"run_stopped"`) || strings.Contains(logs.String(), `"msg":"run_finish_failed"`)
			})
			gate.mu.Lock()
			late := slices.Clone(gate.late)
			gate.mu.Unlock()
			if len(late) != 0 {
				t.Errorf("runner a wrote after losing its lease: %v", late)
			}
			var m struct {
				Epoch  int64  `json:"epoch"`
				Status string `json:"status"`
			}
			mkey, _ := layout.RunManifestKey("late", id)
			readJSON(t, g.store, mkey, &m)
			if m.Epoch != 2 || m.Status != want {
				t.Errorf("after a woke: manifest of epoch %d says %q; want b's (epoch 2) saying %q", m.Epoch, m.Status, want)
			}
			if tt.bFails {
				return
			}
			var result string
			key, _ := layout.RunOutputKey("late", id, "result.json")
			readJSON(t, g.store, key, &result)
			if result != "b" {
				t.Errorf("after a woke: result.json by %q, want b's", result)
			}
		})
	}
}

// TestCanceledStepRecordedCanceled (issue 10 H): a step stopped by a cancel
// is recorded CANCELED, whatever error it returned.
func TestCanceledStepRecordedCanceled(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	in := make(chan struct{})
	agent := run.Agent{Slug: "cancel-code", Machine: lifecycle.MachineCancelable, Steps: []run.Step{{Name: "work",
		Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
			close(in)
			_ = activity.Hang(ctx)
			return run.StepOutput{}, fmt.Errorf("upstream call aborted")
		}}}}
	r, _ := g.runner("a", nil, agent)
	id := submit(t, r, agent.Slug)
	<-in
	if _, err := r.Cancel(context.Background(), id, lifecycle.ActorGateway, run.CancelRequest{Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	if st := g.wait(r, id, 0, 0); st.Status != "canceled" {
		t.Fatalf("run %s", st.Status)
	}
	steps, err := r.Steps(context.Background(), id)
	if err != nil || len(steps) != 1 || !strings.HasPrefix(steps[0].Error, codes.Canceled+":") {
		t.Fatalf("step files %+v (%v), want the step recorded %s", steps, err, codes.Canceled)
	}
}

// TestFaultJunkSlot (fault 4, last part): a slot object that is not a slot
// (junk bytes, a run id that is no id), as another tool might leave it, is
// quarantined, and the agent keeps running.
func TestFaultJunkSlot(t *testing.T) {
	t.Parallel()
	stores := faultStores
	junk := []string{"{not json", `{"run_id": "../../etc"}`}
	for _, st := range stores {
		for i, j := range junk {
			t.Run(fmt.Sprintf("%s/%d", st.name, i), func(t *testing.T) {
				t.Parallel()
				s := st.new(t)
				if _, err := s.Put(context.Background(), "agents/junk/slots/0.json", []byte(j), storage.Condition{}); err != nil {
					t.Fatal(err)
				}
				g := newRig(t, s)
				var logs *testlog.Buffer
				agent := run.Agent{Slug: "junk", Steps: []run.Step{okStep("work")}}
				r, _ := g.runner("a", func(c *run.Config) { logs = capture(c) }, agent)
				for range 2 {
					id := submit(t, r, agent.Slug)
					if st := g.wait(r, id, time.Second, time.Minute); st.Status != "completed" {
						t.Fatalf("run beside a junk slot: %s %s", st.Status, deref(st.Error))
					}
				}
				if n := strings.Count(logs.String(), `"msg":"slot_failed"`); n != 0 {
					t.Errorf("slot_failed logged %d times", n)
				}
				var q []string
				for e, err := range records.ListQuarantine(context.Background(), s) {
					if err == nil {
						q = append(q, e.Key)
					}
				}
				if len(q) != 1 || q[0] != "agents/junk/slots/0.json" || r.Quarantined() != 1 {
					t.Errorf("quarantine holds %v (counted %d), want the junk slot", q, r.Quarantined())
				}
			})
		}
	}
}

// cutStore cancels its runner the moment that runner tries to write a key
// matching match, and refuses that write, as if the process died just
// before it.
type cutStore struct {
	driver.Store
	match  func(string) bool
	cancel context.CancelFunc
}

func (c *cutStore) Put(ctx context.Context, key string, v []byte, cond storage.Condition) (storage.Version, error) {
	if c.match(key) {
		c.cancel()
		<-ctx.Done()
		return "", ctx.Err()
	}
	return c.Store.Put(ctx, key, v, cond)
}

// TestRestartResumesUnstartedStep (issue 10 H): a process that restarts
// with the same Owner takes its runs over at once, and a step that is not
// idempotent but provably never started (no start marker) runs instead of
// failing the run RUN_ORPHANED or RUN_RESUME_FAILED.
func TestRestartResumesUnstartedStep(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	var twoRuns atomic.Int32
	agent := run.Agent{Slug: "restarted", Steps: []run.Step{
		{Name: "one", Resumable: true, Run: okStep("one").Run},
		{Name: "two", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			twoRuns.Add(1)
			return run.StepOutput{}, nil
		}},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	cut := &cutStore{Store: g.store, cancel: cancel, match: func(k string) bool { return strings.HasSuffix(k, "/steps/02-two.json") }}
	first, err := run.NewRunner(run.Config{Store: storage.New(cut), Owner: "host-a", Clock: g.clock, Node: "test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, agent)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	id := submit(t, first, agent.Slug)
	if err := <-done; err != nil { // died right before step two
		t.Fatal(err)
	}
	if st := status(t, first, id); st.Status != "running" || st.StepsCompleted != 1 || st.Lease == nil {
		t.Fatalf("after the first process died: %+v", st)
	}
	second, _ := g.runner("host-a", nil, agent) // restarted, same identity
	st := g.wait(second, id, 0, 0)              // no time passes: no lease lapses
	if st.Status != "completed" || st.ResumeCount != 1 || twoRuns.Load() != 1 {
		t.Fatalf("after the restart: %s %s, resumed %d, step two ran %d times", st.Status, deref(st.Error), st.ResumeCount, twoRuns.Load())
	}
}

// TestDefaultOwnerIsStable: the default Owner survives a restart (no pid,
// nothing random), so TestRestartResumesUnstartedStep holds by default.
func TestDefaultOwnerIsStable(t *testing.T) {
	t.Parallel()
	mk := func() string {
		r, err := run.NewRunner(run.Config{Store: memStore(t)}, run.Agent{Slug: "x", Steps: []run.Step{okStep("s")}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Owner()
	}
	if a, b := mk(), mk(); a != b || a != procid.Owner() || strings.Contains(a, fmt.Sprint(os.Getpid())) {
		t.Fatalf("default owners %q, %q", a, b)
	}
}

// TestFaultPoisonRunIndex: a run's index entry (index/runs/{id}.json) that
// cannot be decoded or names no valid agent made the run unreachable by id:
// every call returned the decode error. It is quarantined, the run is found
// again among the runner's agents and its entry rewritten.
func TestFaultPoisonRunIndex(t *testing.T) {
	t.Parallel()
	for _, sc := range faultStores {
		for i, junk := range []string{"{not json", `{"agent_slug":"../../etc"}`, `{"agent_slug":""}`} {
			t.Run(fmt.Sprintf("%s/%d", sc.name, i), func(t *testing.T) {
				t.Parallel()
				g := newRig(t, sc.new(t))
				agent := run.Agent{Slug: "indexed", Steps: []run.Step{okStep("work")}}
				r, _ := g.runner("a", nil, agent)
				id := submit(t, r, agent.Slug)
				if st := g.wait(r, id, time.Second, time.Minute); st.Status != "completed" {
					t.Fatalf("run %s", st.Status)
				}
				idx, _ := layout.RunIndexKey(id)
				if _, err := g.store.Put(context.Background(), idx, []byte(junk), storage.Condition{}); err != nil {
					t.Fatal(err)
				}
				st, err := r.Status(context.Background(), id)
				if err != nil || st.Status != "completed" || st.RunID != id {
					t.Fatalf("Status behind a poison index entry: %+v, %v", st, err)
				}
				var got map[string]string
				readJSON(t, g.store, idx, &got)
				if got["agent_slug"] != agent.Slug {
					t.Fatalf("index entry after repair: %v", got)
				}
				found := false
				for q, err := range records.ListQuarantine(context.Background(), g.store) {
					if err != nil {
						t.Fatal(err)
					}
					found = found || (q.Key == idx && string(q.Data) == junk)
				}
				if !found || r.Quarantined() != 1 {
					t.Fatalf("the poison entry is not in quarantine (counted %d)", r.Quarantined())
				}
			})
		}
	}
}

// TestMachineChangedByRollingConfig: runners sharing a store that disagree
// on an agent's machine (a rolling change of config) each treat a run by
// the machine it was created with. Before, the runner with the new config
// quarantined every run the old config had created.
func TestMachineChangedByRollingConfig(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	step := []run.Step{{Name: "work", Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}
	old, stopOld := g.runner("old", nil, run.Agent{Slug: "rolling", Steps: step})
	id := submit(t, old, "rolling")
	stopOld()
	r, _ := g.runner("new", nil, run.Agent{Slug: "rolling", Machine: lifecycle.MachineCancelable, Steps: step})
	// The old runner may have started it: the new one takes it over when
	// its lease lapses.
	if st := g.wait(r, id, time.Minute, 15*time.Minute); st.Status != string(machine.RunCompleted) || st.Machine != "" {
		t.Fatalf("the old config's run: status %q machine %q, want completed on the canonical machine", st.Status, st.Machine)
	}
	if n := r.Quarantined(); n != 0 {
		t.Fatalf("%d records quarantined, want 0", n)
	}
	id2 := submit(t, r, "rolling")
	if st := g.wait(r, id2, 0, 0); st.Status != string(machine.CancelableSucceeded) || st.Machine != lifecycle.MachineCancelable {
		t.Fatalf("the new config's run: status %q machine %q", st.Status, st.Machine)
	}
}
