package run_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// The runner on a store that settles (issue 27): a false not-found read of
// a run, or a create-only write accepted over one, within the store's
// settle time of a disturbance, must not make a run execute twice or take
// a slot from a run that executes.
const settle = 10 * time.Second

// gatedCounter counts its executions by run id, and holds each until gate
// is closed.
type gatedCounter struct {
	mu   sync.Mutex
	runs map[string]int
	gate chan struct{}
	in   chan string
}

func newGatedCounter() *gatedCounter {
	return &gatedCounter{runs: map[string]int{}, gate: make(chan struct{}), in: make(chan string, 8)}
}

func (c *gatedCounter) step() run.Step {
	return run.Step{Name: "work", Idempotent: true, Timeout: time.Hour, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		c.mu.Lock()
		c.runs[in.RunID]++
		c.mu.Unlock()
		c.in <- in.RunID
		if !testSelect(ctx, c.gate) {
			return run.StepOutput{}, ctx.Err()
		}
		return run.StepOutput{Summary: "work"}, nil
	}}
}

func (c *gatedCounter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

// A runner whose poll read an executing run's status as missing finished
// its "half-written submit" with a create-only write the store took over
// the status: the run started over, its step executed a second time.
func TestSettleRunReadMissingIsNotSubmittedAgain(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	fs := faultstore.New(g.store)
	fs.SetSettle(settle, g.clock.Now)
	steps := newGatedCounter()
	agent := run.Agent{Slug: "settle", Concurrency: 2, Steps: []run.Step{steps.step(), okStep("after")}}
	// No index repair pass: the poll alone reads the run's status.
	long := func(c *run.Config) { c.RunTimeout, c.IndexRepairInterval = 24*time.Hour, 24*time.Hour }
	a, _ := g.runner("a", long, agent) // executes the run, on the true store
	id := submit(t, a, agent.Slug)
	<-steps.in
	// Started once the run executes under a's lease: it watches the run.
	b, _ := g.with(storage.New(fs)).runner("b", long, agent) // polls through the faults
	// Past the submit's lease, so an absent status looks like a submit
	// that stopped half-way.
	start := g.clock.Now()
	g.advanceUntil(time.Second, 10*time.Minute, func() bool { return g.clock.Now().Sub(start) > 6*time.Minute },
		func() string { return "time did not pass" })
	fs.Match(func(k string) bool { return strings.HasSuffix(k, id+"/status.json") })
	fs.FalseNotFound(1)
	fs.AcceptCreateOver(1)
	g.advanceUntil(time.Second, time.Hour, func() bool { return fs.Faults().FalseNotFounds > 0 },

		func() string { return "runner b never read the run's status" })
	mark := g.clock.Now()
	g.advanceUntil(time.Second, 10*time.Minute, func() bool { return g.clock.Now().Sub(mark) > 2*settle },
		func() string { return "time did not pass" })
	close(steps.gate)
	st := g.wait(b, id, time.Second, 10*time.Minute)
	if st.Status != "completed" {
		t.Fatalf("run %s: %s %s (executed %d times)", id, st.Status, deref(st.Error), steps.count(id))
	}
	if n := steps.count(id); n != 1 {
		t.Fatalf("the run's step executed %d times; want once (%d double creates)", n, fs.Faults().DoubleCreates)
	}
}

// A runner that read the run holding an agent's only slot as missing took
// the slot: two runs executed at once on an agent of concurrency 1.
func TestSettleSlotOfARunReadMissingIsNotTaken(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	fs := faultstore.New(g.store)
	fs.SetSettle(settle, g.clock.Now)
	steps := newGatedCounter()
	agent := run.Agent{Slug: "settle", Concurrency: 1, Steps: []run.Step{steps.step(), okStep("after")}}
	long := func(c *run.Config) { c.RunTimeout, c.IndexRepairInterval = 24*time.Hour, 24*time.Hour }
	a, _ := g.runner("a", long, agent)
	first := submit(t, a, agent.Slug)
	<-steps.in
	b, _ := g.with(storage.New(fs)).runner("b", long, agent)
	g.idle() // b's first poll read the first run: it watches it until its lease ends
	fs.Match(func(k string) bool { return strings.HasSuffix(k, first+"/status.json") })
	fs.FalseNotFound(1)
	second := submit(t, b, agent.Slug)
	start := g.clock.Now()
	g.advanceUntil(time.Second, time.Hour, func() bool { return g.clock.Now().Sub(start) > 2*settle || steps.count(second) > 0 },
		func() string { return "time did not pass" })
	if fs.Faults().FalseNotFounds == 0 {
		t.Fatal("the test provoked no false not-found")
	}
	if steps.count(second) > 0 {
		t.Fatalf("run %s started while %s held the agent's only slot", second, first)
	}
	close(steps.gate)
	for _, id := range []string{first, second} {
		if st := g.wait(b, id, time.Second, time.Hour); st.Status != "completed" {
			t.Fatalf("run %s: %s %s", id, st.Status, deref(st.Error))
		}
	}
}

// A runner taking over a run whose input it read as missing ran the run's
// steps with no input.
func TestSettleRunTakenOverKeepsItsInput(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	fs := faultstore.New(g.store)
	fs.SetSettle(settle, g.clock.Now)
	var mu sync.Mutex
	var inputs []string
	started := make(chan struct{}, 4)
	work := run.Step{Name: "work", Idempotent: true, Timeout: time.Hour, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		mu.Lock()
		inputs = append(inputs, string(in.Input))
		first := len(inputs) == 1
		mu.Unlock()
		started <- struct{}{}
		if first { // the first runner stops during it
			<-ctx.Done()
			return run.StepOutput{}, ctx.Err()
		}
		return run.StepOutput{Summary: "work"}, nil
	}}
	agent := run.Agent{Slug: "settle", Concurrency: 1, Steps: []run.Step{work, okStep("after")}}
	long := func(c *run.Config) { c.RunTimeout, c.IndexRepairInterval = 24*time.Hour, 24*time.Hour }
	a, stopA := g.runner("a", long, agent)
	res, err := a.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: agent.Slug, Input: []byte(`{"topic":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	stopA()
	fs.Match(func(k string) bool { return strings.HasSuffix(k, res.RunID+"/input.json") })
	fs.FalseNotFound(1)
	b, _ := g.with(storage.New(fs)).runner("b", long, agent)
	if st := g.wait(b, res.RunID, time.Second, time.Hour); st.Status != "completed" {
		t.Fatalf("run %s: %s %s", res.RunID, st.Status, deref(st.Error))
	}
	if fs.Faults().FalseNotFounds == 0 {
		t.Fatal("the test provoked no false not-found")
	}
	mu.Lock()
	defer mu.Unlock()
	for i, in := range inputs {
		if in != `{"topic":"x"}` {
			t.Fatalf("execution %d of the step had input %q; want the run's", i+1, in)
		}
	}
}

// refuseStatus refuses every write of a run's status.json, as a submit
// killed before its last write: the run's other objects are written.
type refuseStatus struct{ driver.Store }

func (s refuseStatus) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	if strings.HasSuffix(key, "/status.json") {
		return "", &storage.OpError{Op: "put", Key: key, Kind: storage.ErrInvalidKey}
	}
	return s.Store.Put(ctx, key, v, c)
}

// A runner finishing a submit that stopped before its status, whose read
// of the run's input answered a false not-found, failed the run for an
// input that was there.
func TestSettleStoppedSubmitKeepsItsInput(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	fs := faultstore.New(g.store)
	fs.SetSettle(settle, g.clock.Now)
	steps := newGatedCounter()
	close(steps.gate)
	agent := run.Agent{Slug: "settle", Concurrency: 1, Steps: []run.Step{steps.step(), okStep("after")}}
	long := func(c *run.Config) { c.RunTimeout, c.IndexRepairInterval = 24*time.Hour, 24*time.Hour }
	a, stopA := g.with(storage.New(refuseStatus{g.store})).runner("a", long, agent)
	if _, err := a.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: agent.Slug, Input: []byte(`{"topic":"x"}`)}); err == nil {
		t.Fatal("the submit wrote its status")
	}
	stopA()
	var id string
	for k, err := range g.store.List(context.Background(), "agents/settle/runs/") {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(k, "/input.json") {
			id = strings.TrimSuffix(strings.TrimPrefix(k, "agents/settle/runs/"), "/input.json")
		}
	}
	if id == "" {
		t.Fatal("the submit wrote no input")
	}
	fs.Match(func(k string) bool { return strings.HasSuffix(k, id+"/input.json") })
	fs.FalseNotFound(1)
	b, _ := g.with(storage.New(fs)).runner("b", long, agent)
	st := g.wait(b, id, time.Second, time.Hour)
	if fs.Faults().FalseNotFounds == 0 {
		t.Fatal("the test provoked no false not-found")
	}
	if st.Status != "completed" || steps.count(id) != 1 {
		t.Fatalf("run %s: %s %s, its step executed %d times; want completed once", id, st.Status, deref(st.Error), steps.count(id))
	}
}

// A run submitted without an input, taken over on a store that settles,
// waited the settle time for evidence that its input.json was missing
// (every run without input, picked up by a process other than its
// submitter's, started that much later). Its active entry says it has
// none, so it starts as soon as on a store that settles at once.
func TestSettleRunWithoutInputTakenOverDoesNotWait(t *testing.T) {
	t.Parallel()
	takeover := func(t *testing.T, settling bool) time.Duration {
		g := newRig(t, nil)
		var store *storage.Store = g.store
		if settling {
			fs := faultstore.New(g.store)
			fs.SetSettle(settle, g.clock.Now)
			store = storage.New(fs)
		}
		var mu sync.Mutex
		var starts []time.Time
		started := make(chan struct{}, 4)
		work := run.Step{Name: "work", Idempotent: true, Timeout: time.Hour, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			mu.Lock()
			starts = append(starts, g.clock.Now())
			first := len(starts) == 1
			mu.Unlock()
			started <- struct{}{}
			if first {
				<-ctx.Done()
				return run.StepOutput{}, ctx.Err()
			}
			return run.StepOutput{Summary: "work"}, nil
		}}
		agent := run.Agent{Slug: "settle", Concurrency: 1, Steps: []run.Step{work}}
		long := func(c *run.Config) { c.RunTimeout, c.IndexRepairInterval = 24*time.Hour, 24*time.Hour }
		a, stopA := g.with(store).runner("a", long, agent)
		res, err := a.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: agent.Slug})
		if err != nil {
			t.Fatal(err)
		}
		<-started
		stopA()
		b, _ := g.with(store).runner("b", long, agent)
		if st := g.wait(b, res.RunID, time.Second, time.Hour); st.Status != "completed" {
			t.Fatalf("run %s: %s %s", res.RunID, st.Status, deref(st.Error))
		}
		mu.Lock()
		defer mu.Unlock()
		return starts[len(starts)-1].Sub(starts[0])
	}
	base, got := takeover(t, false), takeover(t, true)
	if got >= base+settle/2 {
		t.Fatalf("taken over %v after its first start on a store that settles, %v on one that settles at once: it waited for an input it never had", got, base)
	}
}

// killedAtStatus is a submitter's store as seen by a process killed when
// it writes the run's status: that write, and every later update of the
// key's record, never lands.
type killedAtStatus struct{ driver.Store }

func (s killedAtStatus) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	if strings.HasSuffix(key, "/status.json") || (strings.HasPrefix(key, "idempotency/") && !strings.HasPrefix(key, "idempotency/runs/") && c.Kind() == driver.MatchVersion) {
		return "", &storage.OpError{Op: "put", Key: key, Kind: storage.ErrInvalidKey}
	}
	return s.Store.Put(ctx, key, v, c)
}

// A key whose submit was killed before the run's status, retried by its
// client on a store that settles: the retry that took the lapsed lease
// could not yet believe the status missing and recorded that as the key's
// failure; after its attempts every retry was answered that stored error,
// and the run was never created (a key answered 409 for a minute on a
// cluster). Now the key is answered its run once the absence is sure.
func TestSettleKilledSubmitIsAnsweredOnceTheAbsenceIsSure(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	fs := faultstore.New(g.store)
	long := 40 * time.Second // longer than the key's lease (20 s), as on a cluster
	fs.SetSettle(long, g.clock.Now)
	agent := run.Agent{Slug: "settle", Steps: []run.Step{okStep("work")}}
	req := lifecycle.SubmitRequest{AgentSlug: agent.Slug, IdempotencyKey: "api:client:killed-1"}
	a, stopA := g.with(storage.New(killedAtStatus{fs})).runner("a", nil, agent)
	if _, err := a.Submit(context.Background(), req); err == nil {
		t.Fatal("the killed submit wrote its status")
	}
	stopA()
	b, _ := g.with(storage.New(fs)).runner("b", nil, agent)
	start := g.clock.Now()
	var res lifecycle.SubmitResult
	g.advanceUntil(time.Second, 5*time.Minute, func() bool {
		var err error
		res, err = b.Submit(context.Background(), req)
		var failed *run.IdempotencyFailedError
		if errors.As(err, &failed) {
			t.Fatalf("after %v the retry was answered a stored failure: %v", g.clock.Now().Sub(start), err)
		}
		return err == nil
	}, func() string { return "the retry was never answered" })
	// The lease lapses, then the absence must be seen a settle time apart.
	if took, bound := g.clock.Now().Sub(start), 20*time.Second+2*long; took > bound { // 20 s: the default lease
		t.Errorf("the retry was answered after %v, want within %v", took, bound)
	}
	if st := g.wait(b, res.RunID, time.Second, time.Minute); st.Status != "completed" {
		t.Fatalf("run %s: %s", res.RunID, st.Status)
	}
}
