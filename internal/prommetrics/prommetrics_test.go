package prommetrics_test

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
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	promadapter "github.com/runconveyor/conveyor/internal/prommetrics"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

var t0 = time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)

var quiet = slog.New(slog.DiscardHandler)

const briefContent = `{"title":"Brief","body":"Short text","entity_map":{},"word_count":2}`

func newMetrics(t *testing.T, opts ...promadapter.Option) (*prometheus.Registry, *promadapter.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := promadapter.New(reg, append([]promadapter.Option{promadapter.Logger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

func newQueue(t *testing.T, s *storage.Store, clk clock.Clock, m jobqueue.Metrics, mod ...func(*jobqueue.Config)) *jobqueue.Queue {
	t.Helper()
	cfg := jobqueue.Config{Store: s, Clock: clk, Logger: quiet, Metrics: m}
	for _, f := range mod {
		f(&cfg)
	}
	q, err := jobqueue.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// compare checks the named metrics of reg against want, in the text
// exposition format (HELP and TYPE lines included).
func compare(t *testing.T, reg prometheus.Gatherer, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// runSignalling passes every call on and tells the test when a run's end
// was recorded, which the Runner does just after the status write that
// Wait sees.
type runSignalling struct {
	*promadapter.Metrics
	finished chan string
}

func (s runSignalling) RunFinished(agent, status string, d time.Duration) {
	s.Metrics.RunFinished(agent, status, d)
	s.finished <- status
}

// TestRunMetrics: a real Runner's run that completes reports its
// transitions, its duration, the active gauge back at 0, the step's
// duration, and an idempotency miss then hit.
func TestRunMetrics(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics(t, promadapter.Tenant("acme"))
	clk := clock.NewFake(t0)
	step := func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		clk.Advance(3 * time.Second) // the step's work takes 3 s of fake time
		return run.StepOutput{Summary: "ok"}, nil
	}
	sig := runSignalling{Metrics: m, finished: make(chan string, 1)}
	r, err := run.NewRunner(run.Config{Store: memstore.New(), Clock: clk, Logger: quiet, Metrics: sig},
		run.Agent{Slug: "archivist", Steps: []run.Step{{Name: "research", Run: step}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchRuns(r); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { stop(); <-done }()

	req := lifecycle.SubmitRequest{AgentSlug: "archivist", IdempotencyKey: "api:client-1:req-1"}
	res, err := r.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Wait(ctx, res.RunID)
	if err != nil || st.Status != "completed" {
		t.Fatalf("run: %+v %v", st, err)
	}
	if status := within(t, sig.finished); status != "completed" {
		t.Fatalf("RunFinished(%q)", status)
	}
	if _, err := r.Submit(ctx, req); err != nil { // the same key: a hit
		t.Fatal(err)
	}

	compare(t, reg, `
# HELP gwi_run_transitions_total Run status transitions.
# TYPE gwi_run_transitions_total counter
gwi_run_transitions_total{from_state="",tenant_id="acme",to_state="requested"} 1
gwi_run_transitions_total{from_state="queued",tenant_id="acme",to_state="running"} 1
gwi_run_transitions_total{from_state="requested",tenant_id="acme",to_state="queued"} 1
gwi_run_transitions_total{from_state="running",tenant_id="acme",to_state="completed"} 1
# HELP gwi_idempotency_hits_total Idempotency key lookups, result hit or miss.
# TYPE gwi_idempotency_hits_total counter
gwi_idempotency_hits_total{result="hit",source="api"} 1
gwi_idempotency_hits_total{result="miss",source="api"} 1
`, "gwi_run_transitions_total", "gwi_idempotency_hits_total")

	// Every active status the run passed through is back to 0.
	for _, status := range []string{"requested", "queued", "running"} {
		p, err := find(reg, "gwi_run_active_gauge", map[string]string{"status": status, "tenant_id": "acme"})
		if err != nil {
			t.Fatal(err)
		}
		if v := p.GetGauge().GetValue(); v != 0 {
			t.Errorf("gwi_run_active_gauge{status=%q} = %v, want 0", status, v)
		}
	}
	h := histogram(t, reg, "gwi_run_duration_seconds", map[string]string{"type": "archivist", "status": "completed", "tenant_id": "acme"})
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 3 {
		t.Errorf("gwi_run_duration_seconds: count %d sum %v, want 1 run of 3 s", h.GetSampleCount(), h.GetSampleSum())
	}
	h = histogram(t, reg, "conveyor_run_step_duration_seconds", map[string]string{"agent": "archivist", "step": "research", "status": "completed"})
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 3 {
		t.Errorf("conveyor_run_step_duration_seconds: count %d sum %v, want 1 step of 3 s", h.GetSampleCount(), h.GetSampleSum())
	}
}

// signalling passes every call on to the Prometheus metrics and tells the
// test when a job attempt failed or a job finished: the test waits for the
// Worker's writes on that, never on time.
type signalling struct {
	*promadapter.Metrics
	events chan string
}

func (s signalling) AttemptFailed(t lifecycle.JobType, step lifecycle.JobState, code string) {
	s.Metrics.AttemptFailed(t, step, code)
	s.events <- "failed"
}

func (s signalling) JobFinished(t lifecycle.JobType, outcome lifecycle.JobState, d time.Duration) {
	s.Metrics.JobFinished(t, outcome, d)
	s.events <- "finished " + string(outcome)
}

// TestJobMetrics: a real Worker runs one job to COMPLETE and one that
// fails every attempt to DEAD after its retries.
func TestJobMetrics(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics(t)
	clk := clock.NewFake(t0)
	sig := signalling{Metrics: m, events: make(chan string, 16)}
	q := newQueue(t, memstore.New(), clk, sig, func(c *jobqueue.Config) { c.Backoff = []time.Duration{0} })
	ctx, stop := context.WithCancel(context.Background())
	enqueue := func(id, agent string) {
		t.Helper()
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: id, RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: agent}); err != nil {
			t.Fatal(err)
		}
	}
	w := &jobqueue.Worker{Queue: q, ID: "w1", SweepInterval: -1, Handlers: jobqueue.Handlers{
		AssembleContext: func(ctx context.Context, job lifecycle.Job) (json.RawMessage, error) {
			if job.AgentSlug == "agent-ok" {
				clk.Advance(time.Second) // context assembly takes 1 s
			}
			return json.RawMessage(`{}`), nil
		},
		CallNotebookLM: func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
			if job.AgentSlug == "agent-bad" {
				return lifecycle.JobOutput{}, &jobqueue.StatusError{Code: 503}
			}
			clk.Advance(4 * time.Second)
			return lifecycle.JobOutput{Content: json.RawMessage(briefContent)}, nil
		},
	}}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { stop(); <-done }()

	// The first job needs no time to pass: the enqueue wakes the Worker.
	enqueue("job-ok", "agent-ok")
	if e := within(t, sig.events); e != "finished COMPLETE" {
		t.Fatalf("event %q", e)
	}
	// The second one fails every attempt; its retries are due at once
	// (Config.Backoff 0), so the Worker runs them without the clock moving.
	enqueue("job-bad", "agent-bad")
	for _, want := range []string{"failed", "failed", "failed", "finished DEAD"} {
		if e := within(t, sig.events); e != want {
			t.Fatalf("event %q, want %q", e, want)
		}
	}

	compare(t, reg, `
# HELP conveyor_jobs_dead_total Jobs gone DEAD.
# TYPE conveyor_jobs_dead_total counter
conveyor_jobs_dead_total{job_type="BRIEF"} 1
# HELP conveyor_job_retries_total Job retries: RETRY_BACKOFF → QUEUED.
# TYPE conveyor_job_retries_total counter
conveyor_job_retries_total{job_type="BRIEF"} 2
# HELP conveyor_job_failed_attempts_total Failed job attempts by pipeline step and error_code.
# TYPE conveyor_job_failed_attempts_total counter
conveyor_job_failed_attempts_total{code="UNAVAILABLE",job_type="BRIEF",step="NOTEBOOKLM_CALL"} 3
`, "conveyor_jobs_dead_total", "conveyor_job_retries_total", "conveyor_job_failed_attempts_total")

	tr := func(from, to string) float64 {
		p, err := find(reg, "conveyor_job_transitions_total", map[string]string{"job_type": "BRIEF", "from_state": from, "to_state": to})
		if err != nil {
			t.Fatal(err)
		}
		return p.GetCounter().GetValue()
	}
	for _, c := range []struct {
		from, to string
		n        float64
	}{
		{"", "PENDING", 2}, {"PENDING", "QUEUED", 2}, {"QUEUED", "CONTEXT_ASSEMBLY", 4},
		{"CONTEXT_ASSEMBLY", "NOTEBOOKLM_CALL", 4}, {"NOTEBOOKLM_CALL", "ARTIFACT_WRITE", 1}, {"ARTIFACT_WRITE", "COMPLETE", 1},
		{"NOTEBOOKLM_CALL", "RETRY_BACKOFF", 3}, {"RETRY_BACKOFF", "QUEUED", 2}, {"RETRY_BACKOFF", "FAILED", 1}, {"FAILED", "DEAD", 1},
	} {
		if got := tr(c.from, c.to); got != c.n {
			t.Errorf("transitions %s → %s = %v, want %v", c.from, c.to, got, c.n)
		}
	}
	h := histogram(t, reg, "conveyor_job_duration_seconds", map[string]string{"job_type": "BRIEF", "outcome": "COMPLETE"})
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 5 {
		t.Errorf("COMPLETE job duration: count %d sum %v, want one of 5 s", h.GetSampleCount(), h.GetSampleSum())
	}
	h = histogram(t, reg, "conveyor_job_duration_seconds", map[string]string{"job_type": "BRIEF", "outcome": "DEAD"})
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 0 {
		t.Errorf("DEAD job duration: count %d sum %v, want one of 0 s", h.GetSampleCount(), h.GetSampleSum())
	}
	// Time in NOTEBOOKLM_CALL: 4 s for the job that completed, 0 for each
	// failed attempt.
	h = histogram(t, reg, "conveyor_job_state_duration_seconds", map[string]string{"job_type": "BRIEF", "state": "NOTEBOOKLM_CALL"})
	if h.GetSampleCount() != 4 || h.GetSampleSum() != 4 {
		t.Errorf("NOTEBOOKLM_CALL time: count %d sum %v, want 4 observations of 4 s in all", h.GetSampleCount(), h.GetSampleSum())
	}
	h = histogram(t, reg, "conveyor_job_state_duration_seconds", map[string]string{"job_type": "BRIEF", "state": "RETRY_BACKOFF"})
	if h.GetSampleCount() != 3 {
		t.Errorf("RETRY_BACKOFF time: count %d, want 3", h.GetSampleCount())
	}
}

// within returns the next value of ch, failing the test after 10 s.
func within[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing within 10 s")
		panic("unreachable")
	}
}

// TestQueueCollector: the queue gauges come from the lanes at scrape time.
func TestQueueCollector(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics(t)
	clk := clock.NewFake(t0)
	q := newQueue(t, memstore.New(), clk, m)
	if err := m.WatchQueue(q); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"job-1", "job-2"} {
		if _, err := q.Enqueue(context.Background(), lifecycle.ActorGateway, jobqueue.NewJob{JobID: id, RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a"}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(6 * time.Minute)
	compare(t, reg, `
# HELP conveyor_queue_depth Jobs waiting in an agent's ready lane: state ready (due now, not yet picked up) or waiting (in RETRY_BACKOFF).
# TYPE conveyor_queue_depth gauge
conveyor_queue_depth{agent="agent-a",state="ready"} 2
conveyor_queue_depth{agent="agent-a",state="waiting"} 0
# HELP conveyor_queue_oldest_ready_age_seconds How long the agent's oldest ready job has waited for a worker; 0 when none is ready (alert: QUEUED > 5 min).
# TYPE conveyor_queue_oldest_ready_age_seconds gauge
conveyor_queue_oldest_ready_age_seconds{agent="agent-a"} 360
# HELP conveyor_queue_scrape_errors_total Scrapes whose read of the job queue failed or ran out of time; the queue gauges are missing from those scrapes.
# TYPE conveyor_queue_scrape_errors_total counter
conveyor_queue_scrape_errors_total 0
`, "conveyor_queue_depth", "conveyor_queue_oldest_ready_age_seconds", "conveyor_queue_scrape_errors_total")
	if err := m.WatchQueue(q); err == nil {
		t.Fatal("a second WatchQueue on one registry registered")
	}
}

// TestQueueCollectorStoreDown: with the store down a scrape returns within
// its timeout, without the queue gauges, and counts the error; the other
// metrics are still served.
func TestQueueCollectorStoreDown(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics(t, promadapter.ScrapeTimeout(50*time.Millisecond))
	fs := faultstore.New(memstore.New())
	// The queue waits out store outages on its clock (storage.Store.Patient): a
	// fake one that never moves makes the read wait until the scrape's
	// deadline, the worst case.
	q := newQueue(t, storage.New(fs), clock.NewFake(t0), m)
	if _, err := q.Enqueue(context.Background(), lifecycle.ActorGateway, jobqueue.NewJob{JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchQueue(q); err != nil {
		t.Fatal(err)
	}
	fs.Down()
	for i := range 2 {
		start := time.Now()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("scrape took %s with the store down", took)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if len(mf.GetMetric()) > 0 {
				got[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		if _, ok := got["conveyor_queue_depth"]; ok {
			t.Fatal("queue depth exported from a failed read")
		}
		if got["conveyor_queue_scrape_errors_total"] != float64(i+1) {
			t.Fatalf("scrape %d: errors %v", i+1, got["conveyor_queue_scrape_errors_total"])
		}
		if got["conveyor_job_transitions_total"] != 1 { // PENDING's creation, the first series
			t.Fatalf("the other metrics are missing: %v", got)
		}
	}
	fs.Up()
	if n := testutil.CollectAndCount(reg, "conveyor_queue_depth"); n != 2 {
		t.Fatalf("after the store came back: %d depth series, want 2", n)
	}
}

// TestNewRefusesADuplicateRegistry: two Metrics on one registry collide.
func TestNewRefusesADuplicateRegistry(t *testing.T) {
	t.Parallel()
	reg, _ := newMetrics(t)
	if _, err := promadapter.New(reg); err == nil {
		t.Fatal("New registered the same metrics twice")
	}
}

// ---- helpers ----

func matches(pairs map[string]string, got map[string]string) bool {
	if len(pairs) != len(got) {
		return false
	}
	for k, v := range pairs {
		if got[k] != v {
			return false
		}
	}
	return true
}

func find(reg prometheus.Gatherer, name string, labels map[string]string) (*dto.Metric, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if matches(labels, got) {
				return m, nil
			}
		}
	}
	return nil, errors.New(name + ": no series with those labels")
}

func histogram(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Histogram {
	t.Helper()
	p, err := find(reg, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return p.GetHistogram()
}

// TestScheduleMetrics: two processes' schedulers on one store: the slot
// fired once and suppressed once; slots skipped by a pause are counted.
func TestScheduleMetrics(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics(t)
	store := memstore.New()
	clk := clock.NewFake(t0.Add(30 * time.Second))
	r, err := run.NewRunner(run.Config{Store: store, Clock: clk, Logger: quiet},
		run.Agent{Slug: "reporter", Steps: []run.Step{{Name: "x", Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	sc := []schedule.Schedule{{ID: "hourly", Agent: "reporter", Cron: "@hourly"}}
	ctx := context.Background()
	var scheds []*schedule.Scheduler
	for range 2 {
		s, err := schedule.New(schedule.Config{Runner: r, Store: store, Clock: clk, Logger: quiet, Metrics: m, Schedules: sc})
		if err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
	}
	// One process at a time, so which one fires is known.
	runOnce := func(s *schedule.Scheduler) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = s.Run(rctx); close(done) }()
		<-clk.WaitForTimers(1)
		cancel()
		<-done
	}
	runOnce(scheds[0])
	clk.Advance(time.Hour)
	runOnce(scheds[0]) // fires 11:00
	// The other process read the state before the slot was recorded: it
	// fires 11:00 too, and the store suppresses its run.
	key, _ := layout.ScheduleKey("hourly")
	b, _, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	_ = json.Unmarshal(b, &st)
	st["last_slot"] = t0.Format(time.RFC3339)
	b, _ = json.Marshal(st)
	if _, err := store.Put(ctx, key, b, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	runOnce(scheds[1])
	compare(t, reg, `
# HELP conveyor_schedule_slots_fired_total Schedule slots whose run this process started; caught_up: a missed slot.
# TYPE conveyor_schedule_slots_fired_total counter
conveyor_schedule_slots_fired_total{caught_up="false",schedule="hourly"} 1
# HELP conveyor_schedule_duplicates_suppressed_total Schedule slots another process had fired already.
# TYPE conveyor_schedule_duplicates_suppressed_total counter
conveyor_schedule_duplicates_suppressed_total{schedule="hourly"} 1
`, "conveyor_schedule_slots_fired_total", "conveyor_schedule_duplicates_suppressed_total")
	if _, err := scheds[1].Pause(ctx, "hourly", "admin"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Hour)
	runOnce(scheds[1]) // 12:00, 13:00, 14:00 skipped
	compare(t, reg, `
# HELP conveyor_schedule_slots_skipped_total Schedule slots skipped by the missed-slot policy or a pause.
# TYPE conveyor_schedule_slots_skipped_total counter
conveyor_schedule_slots_skipped_total{schedule="hourly"} 3
`, "conveyor_schedule_slots_skipped_total")
}

func TestRetentionMetrics(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics(t)
	store := memstore.New()
	ctx := context.Background()
	old := t0.Add(-30 * 24 * time.Hour)
	for i := range 3 {
		key, _ := layout.JobKey(fmt.Sprintf("job-%d", i))
		b, _ := json.Marshal(lifecycle.Job{JobID: "x", Status: lifecycle.JobComplete, CreatedAt: old, UpdatedAt: old})
		if _, err := store.Put(ctx, key, b, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	j, err := retention.New(retention.Config{Store: store, Owner: "p1", Clock: clock.NewFake(t0), Age: 7 * 24 * time.Hour, Logger: quiet, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := j.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	compare(t, reg, `
# HELP conveyor_retention_records_deleted_total Finished records the retention janitor deleted, by kind.
# TYPE conveyor_retention_records_deleted_total counter
conveyor_retention_records_deleted_total{kind="jobs"} 3
# HELP conveyor_retention_keys_deleted_total Keys the retention janitor deleted.
# TYPE conveyor_retention_keys_deleted_total counter
conveyor_retention_keys_deleted_total 3
# HELP conveyor_retention_passes_total Retention janitor calls that held the lease, result done or partial.
# TYPE conveyor_retention_passes_total counter
conveyor_retention_passes_total{result="done"} 1
`, "conveyor_retention_records_deleted_total", "conveyor_retention_keys_deleted_total", "conveyor_retention_passes_total")
}
