package conveyor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runconveyor/conveyor"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/probe"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// echo is an agent of one step that completes at once.
var echo = run.Agent{Slug: "echo", Steps: []run.Step{{Name: "say", Idempotent: true,
	Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "said " + string(in.Input)}, nil
	}}}}

// greet is a job type whose handler answers at once.
var greet = map[lifecycle.JobType]jobqueue.TypeConfig{"GREET": {Handler: jobqueue.Typed(
	func(ctx context.Context, name string) (string, error) { return "hello, " + name, nil })}}

// quietAsk is an NLM backend that answers at once, and its agent.
var quietAsk = nlm.Stages{Query: func(ctx context.Context, req lifecycle.NLMRequest, prompt string) (json.RawMessage, error) {
	return []byte(`{"title":"t","body":"b","word_count":1}`), nil
}}

// newClient builds a Client of cfg over a fresh memstore, stopped with
// the test.
func newClient(t *testing.T, cfg conveyor.Config) *conveyor.Client {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	c, err := conveyor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

// TestClientRunAndJob: a run submitted through the Client completes and a
// job inserted through it is COMPLETE with its handler's artifact; every
// engine runs (goleak in TestMain checks Stop ended every goroutine).
func TestClientRunAndJob(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, conveyor.Config{Agents: []run.Agent{echo}, JobTypes: greet, NLMStages: quietAsk,
		Metrics: prometheus.NewRegistry(), Owner: "host/test"})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Runs().Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "echo", Input: []byte(`"hi"`)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Runs().Wait(ctx, res.RunID)
	if err != nil || st.Status != string(machine.RunCompleted) {
		t.Fatalf("run %s: %s, %v", res.RunID, st.Status, err)
	}
	if c.Runs().Owner() != "host/test" || c.Owner() != "host/test" {
		t.Errorf("owner %q, runner's %q, want host/test", c.Owner(), c.Runs().Owner())
	}
	job, err := c.Jobs().Insert(ctx, "GREET", "Ada")
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.Jobs().Wait(ctx, job.JobID)
	if err != nil || done.Status != lifecycle.JobComplete {
		t.Fatalf("job %s: %s, %v", job.JobID, done.Status, err)
	}
	art, err := c.Artifacts().GetForJob(ctx, lifecycle.ActorGateway, "", job.JobID)
	if err != nil || string(art.Content) != `"hello, Ada"` {
		t.Fatalf("artifact %s, %v", art.Content, err)
	}
	if c.NLM() == nil || c.Inbox() == nil || c.Schedules() == nil || c.Store() == nil || c.Clock() == nil {
		t.Fatal("an accessor returned nil")
	}
}

// TestClientPeriodicJob: a Client of jobs alone (no agents) runs a
// schedule that enqueues a job each slot, with its payload, under the
// slot's id, and lists the schedule with the slot's job.
func TestClientPeriodicJob(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, conveyor.Config{JobTypes: greet, Schedules: []lifecycle.Schedule{{ID: "greeter", Every: time.Second,
		Job: &lifecycle.ScheduleJob{JobType: "GREET", Payload: json.RawMessage(`"Ada"`), MaxAttempts: 2}}}})
	if c.Runs() != nil || c.Schedules() == nil {
		t.Fatal("a Client of jobs alone: want no Runner and a Scheduler")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var info lifecycle.ScheduleInfo
	for info.LastJobID == "" {
		infos, err := c.Schedules().List(ctx)
		if err != nil || len(infos) != 1 {
			t.Fatalf("List: %+v, %v", infos, err)
		}
		info = infos[0]
		select {
		case <-ctx.Done():
			t.Fatal("no slot fired in a minute")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if info.LastFired == nil || info.LastJobID != "scheduler:greeter:"+info.LastFired.Format(time.RFC3339) {
		t.Fatalf("last job %q of the slot %v", info.LastJobID, info.LastFired)
	}
	job, err := c.Jobs().Wait(ctx, info.LastJobID)
	if err != nil || job.Status != lifecycle.JobComplete || job.MaxAttempts != 2 || job.JobType != "GREET" {
		t.Fatalf("the slot's job: %+v, %v", job, err)
	}
	if art, err := c.Artifacts().GetForJob(ctx, lifecycle.ActorGateway, "", job.JobID); err != nil || string(art.Content) != `"hello, Ada"` {
		t.Fatalf("artifact %s, %v", art.Content, err)
	}
}

// TestClientPeriodicJobThreeClients: three Clients on one store run one
// schedule of periodic jobs (every second); one is stopped midway. Every
// slot from the first to the last that had time to fire has its job, and
// every job is its slot's, run to COMPLETE.
func TestClientPeriodicJobThreeClients(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := memstore.New()
	var cs []*conveyor.Client
	for i := range 3 {
		c := newClient(t, conveyor.Config{Store: store, Owner: fmt.Sprintf("host/c%d", i), JobTypes: greet, Logger: slog.New(slog.DiscardHandler),
			Schedules: []lifecycle.Schedule{{ID: "greeter", Every: time.Second, Job: &lifecycle.ScheduleJob{JobType: "GREET", Payload: json.RawMessage(`"Ada"`)}}}})
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	began := time.Now()
	time.Sleep(2500 * time.Millisecond)
	if err := cs[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	ended := time.Now()
	slots := map[string]bool{}
	for j, err := range cs[0].Jobs().List(ctx, lifecycle.ActorOrchestration) {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(j.JobID, "scheduler:greeter:") {
			t.Fatalf("job %s is not a slot's", j.JobID)
		}
		if done, err := cs[0].Jobs().Wait(ctx, j.JobID); err != nil || done.Status != lifecycle.JobComplete {
			t.Fatalf("job %s: %s, %v", j.JobID, done.Status, err)
		}
		slots[j.JobID] = true
	}
	first := began.Truncate(time.Second).Add(time.Second)
	for first.Before(ended) && !slots["scheduler:greeter:"+first.UTC().Format(time.RFC3339)] {
		first = first.Add(time.Second)
	}
	var missing []string
	for s := first; s.Before(ended.Add(-time.Second)); s = s.Add(time.Second) {
		if id := "scheduler:greeter:" + s.UTC().Format(time.RFC3339); !slots[id] {
			missing = append(missing, id)
		}
	}
	if first.Sub(began) > 2*time.Second || len(missing) > 0 || len(slots) < 3 {
		t.Fatalf("first slot %s after the start, %d jobs, missing %v", first.Sub(began), len(slots), missing)
	}
}

// TestClientStartStop: Start twice and Add after Start are refused; a
// loop's error reaches Failed with its name; Stop before Start and twice
// does nothing; Stopped is closed after Stop.
func TestClientStartStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, conveyor.Config{Agents: []run.Agent{echo}})
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	boom := errors.New("boom")
	if err := c.Add("broken", func(context.Context) error { return boom }); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); !errors.Is(err, conveyor.ErrStarted) {
		t.Errorf("second Start: %v, want ErrStarted", err)
	}
	if err := c.Add("late", func(context.Context) error { return nil }); !errors.Is(err, conveyor.ErrStarted) {
		t.Errorf("Add after Start: %v, want ErrStarted", err)
	}
	select {
	case err := <-c.Failed():
		if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "broken: ") {
			t.Errorf("Failed: %v, want broken: boom", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Failed received nothing")
	}
	for range 2 {
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	select {
	case <-c.Stopped():
	default:
		t.Fatal("Stopped is open after Stop")
	}
}

// TestClientStopOrderAndDeadline: Stop stops the loops in the reverse order
// of their start, and a loop that will not stop makes Stop return its
// ctx's error at the deadline, having stopped the rest; Stopped closes
// once that loop returns too.
func TestClientStopOrderAndDeadline(t *testing.T) {
	t.Parallel()
	c := newClient(t, conveyor.Config{Agents: []run.Agent{echo}})
	stopped := make(chan string, 3)
	release := make(chan struct{})
	loop := func(name string, stubborn bool) func(context.Context) error {
		return func(ctx context.Context) error {
			<-ctx.Done()
			if stubborn {
				<-release
			}
			stopped <- name
			return nil
		}
	}
	for _, l := range []struct {
		name     string
		stubborn bool
	}{{"first", false}, {"stubborn", true}, {"last", false}} {
		if err := c.Add(l.name, loop(l.name, l.stubborn)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	if err := c.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: %v, want the deadline's error", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Stop took %v past its 200ms deadline", took)
	}
	// The stubborn loop held up the first one until the deadline.
	for _, want := range []string{"last", "first"} {
		if got := <-stopped; got != want {
			t.Errorf("stopped %q, want %q", got, want)
		}
	}
	select {
	case <-c.Stopped():
		t.Fatal("Stopped closed while a loop still ran")
	default:
	}
	close(release)
	if got := <-stopped; got != "stubborn" {
		t.Errorf("stopped %q, want stubborn", got)
	}
	<-c.Stopped()
}

// unconditional is a store that ignores every write's condition, which
// the start-up check catches.
type unconditional struct{ driver.Store }

func (u unconditional) Put(ctx context.Context, key string, value []byte, _ storage.Condition) (storage.Version, error) {
	return u.Store.Put(ctx, key, value, storage.Condition{})
}

// TestClientStoreCheck: Start refuses a store that breaks its promises,
// naming the failed checks; StoreCheckWarn starts on it, and
// StoreCheckOff does not look.
func TestClientStoreCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		check conveyor.StoreCheck
		fails bool
	}{{conveyor.StoreCheckRefuse, true}, {conveyor.StoreCheckWarn, false}, {conveyor.StoreCheckOff, false}}
	for _, tt := range tests {
		c := newClient(t, conveyor.Config{Store: storage.New(unconditional{memstore.New()}), StoreCheck: tt.check})
		err := c.Start(context.Background())
		if tt.fails != (err != nil) {
			t.Fatalf("StoreCheck %d: Start %v, want failure %v", tt.check, err, tt.fails)
		}
		if tt.fails && (!errors.Is(err, conveyor.ErrUnsafeStore) || !errors.Is(err, probe.ErrFailed) ||
			!strings.Contains(err.Error(), probe.CreateOverExisting)) {
			t.Errorf("Start: %v, want ErrUnsafeStore naming %s", err, probe.CreateOverExisting)
		}
	}
}

// TestNewRefuses: New refuses a Config it cannot build, each error
// matching ErrInvalidConfig and saying what.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	tests := []struct {
		name string
		cfg  conveyor.Config
		want string
	}{
		{"no store", conveyor.Config{}, "Store is required"},
		{"runner store", conveyor.Config{Store: store, Runner: run.Config{Store: store}}, "Runner.Store is set by the Client"},
		{"runner owner", conveyor.Config{Store: store, Runner: run.Config{Owner: "x"}}, "Runner.Owner"},
		{"queue types", conveyor.Config{Store: store, Queue: jobqueue.Config{Types: greet}}, "use JobTypes"},
		{"nlm node", conveyor.Config{Store: store, NLM: nlm.Config{Node: "n"}}, "NLM.Node"},
		{"retention kind", conveyor.Config{Store: store, Retention: conveyor.RetentionConfig{Ages: map[string]time.Duration{"runz": time.Hour}}}, "unknown kind"},
		{"NLM agents, no backend", conveyor.Config{Store: store, NLMAgents: func(*nlm.Processor) []run.Agent { return nil }}, "needs NLMStages.Query"},
		{"store check", conveyor.Config{Store: store, StoreCheck: 7}, "StoreCheck 7"},
		{"two agents of a slug", conveyor.Config{Store: store, Agents: []run.Agent{echo, echo}}, "runner:"},
		{"schedules without agents", conveyor.Config{Store: store,
			Schedules: []lifecycle.Schedule{{ID: "tick", Agent: "nobody", Every: time.Minute}}}, "need Agents"},
		{"periodic job of no type", conveyor.Config{Store: store, JobTypes: greet,
			Schedules: []lifecycle.Schedule{{ID: "tick", Every: time.Minute, Job: &lifecycle.ScheduleJob{JobType: "WAVE"}}}}, "not a type of JobTypes"},
		{"schedule of no agent", conveyor.Config{Store: store, Agents: []run.Agent{echo},
			Schedules: []lifecycle.Schedule{{ID: "tick", Agent: "nobody", Every: time.Minute}}}, "scheduler:"},
		{"bad job type", conveyor.Config{Store: store, JobTypes: map[lifecycle.JobType]jobqueue.TypeConfig{"RESEARCH": {}}}, "queue:"},
		{"bad retention age", conveyor.Config{Store: store, Retention: conveyor.RetentionConfig{Age: -time.Hour}}, "retention:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := conveyor.New(tt.cfg)
			if c != nil || !errors.Is(err, conveyor.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, %v; want ErrInvalidConfig saying %q", c, err, tt.want)
			}
		})
	}
}

// TestClientMetricsAtZero: before any event, the Client's registry holds
// the series of its configured agent and job type at zero, and the Go and
// process collectors.
func TestClientMetricsAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	newClient(t, conveyor.Config{Agents: []run.Agent{echo}, JobTypes: greet, Metrics: reg})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			found[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue() == 0
		}
		found[mf.GetName()] = true
	}
	for _, want := range []string{
		"conveyor_run_transitions_total{agent=echo,from_state=,to_state=requested}",
		"conveyor_job_transitions_total{from_state=RETRY_BACKOFF,job_type=GREET,to_state=QUEUED}",
		"conveyor_jobs_dead_total{job_type=GREET}",
		"go_goroutines", "process_cpu_seconds_total",
	} {
		if !found[want] {
			t.Errorf("%s missing (or not 0) before any event", want)
		}
	}
}
