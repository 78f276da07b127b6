// Package prommetrics exports Conveyor's metrics to Prometheus
// (github.com/prometheus/client_golang): the run metrics under the
// platform's own names and labels (gwi_*, docs/spec.md#platform-names),
// the job and step metrics, and the depth and age of the job queue per
// agent, read at scrape time. rules.yml beside this file holds the alerts
// and objectives of docs/spec.md#metrics over these metrics.
//
// New registers the metrics with the Registerer it is given (never the
// global default one) and returns a *Metrics the Client passes to its
// engines (users give the Registerer as conveyor.Config.Metrics);
// WatchQueue adds the queue gauges. It is not public: no user calls the
// per-event methods the engines record through.
//
// New also registers the Go runtime and process collectors (go_*,
// process_*), unless the registry has its own. Seed puts the series of
// every configured agent and job type at zero, so alerts need no absent().
//
// Counters and histograms count what this process wrote: with several
// processes sharing a store, sum them across instances.
// gwi_run_active_gauge is read from the store at scrape time (WatchRuns):
// every instance reports the whole store, so take one (max), not the sum.
//
// Metrics:
//
//	gwi_run_transitions_total{from_state,to_state,tenant_id}     counter   run status writes
//	conveyor_run_transitions_total{agent,from_state,to_state}    counter   run status writes by agent
//	gwi_run_duration_seconds{type,status,tenant_id}              histogram run duration by outcome; type is the agent
//	gwi_run_active_gauge{status,tenant_id}                       gauge     runs not yet terminal, by status, read from the store (WatchRuns)
//	conveyor_run_scrape_errors_total                             counter   scrapes whose read of the runs failed (WatchRuns)
//	gwi_idempotency_hits_total{source,result}                    counter   idempotency lookups, result hit or miss
//	conveyor_run_step_duration_seconds{agent,step,status}        histogram run step durations
//	conveyor_run_steps_abandoned_total{agent,step}               counter   step attempts abandoned at their deadline
//	conveyor_records_quarantined_total{kind}                     counter   poison records quarantined (runs and jobs)
//	conveyor_schedule_slots_fired_total{schedule,caught_up}      counter   schedule slots whose run this process started
//	conveyor_schedule_slots_skipped_total{schedule}              counter   slots skipped by the missed-slot policy or a pause
//	conveyor_schedule_duplicates_suppressed_total{schedule}      counter   slots another process had fired already
//	conveyor_job_transitions_total{job_type,from_state,to_state} counter   job moves: job counts by state
//	conveyor_job_state_duration_seconds{job_type,state}          histogram time a job spent in a state, on leaving it
//	conveyor_job_duration_seconds{job_type,outcome}              histogram created → COMPLETE or DEAD
//	conveyor_jobs_dead_total{job_type}                           counter   jobs gone DEAD
//	conveyor_job_retries_total{job_type}                         counter   retries (RETRY_BACKOFF → QUEUED)
//	conveyor_job_failed_attempts_total{job_type,step,code}       counter   failed attempts by step and error_code
//	conveyor_job_lease_losses_total{job_type}                    counter   jobs rescued after their lease ran out
//	conveyor_job_handlers_abandoned_total{job_type,step}         counter   handler calls abandoned at StepTimeout
//	conveyor_queue_depth{agent,state}                            gauge     ready-lane entries, state ready or waiting (WatchQueue)
//	conveyor_queue_oldest_ready_age_seconds{agent}               gauge     how long the oldest ready job has waited (WatchQueue)
//	conveyor_queue_scrape_errors_total                           counter   scrapes whose queue read failed (WatchQueue)
//	conveyor_retention_records_deleted_total{kind}               counter   finished records the janitor deleted, by kind (a run counts once)
//	conveyor_retention_keys_deleted_total                        counter   keys the janitor deleted (a run's whole folder)
//	conveyor_retention_passes_total{result}                      counter   janitor calls that held the lease: done, or partial (stopped early)
//	conveyor_retention_last_pass_timestamp_seconds               gauge     when this process last finished a pass
//
// Registered beside them, not by New's metrics: the Go runtime and process
// collectors (go_*, process_*; New adds them unless the registry has its
// own), and the HTTP server's, by its Registerer (adapters/httpapi):
//
//	conveyor_http_requests_total{method,route,status}            counter   requests served; route is the pattern, method HTTP's or _OTHER, 499 a client gone
//	conveyor_http_request_duration_seconds{method,route,status}  histogram request latency (an event stream's: its connection's life)
package prommetrics

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// Buckets are the histograms' upper bounds in seconds. They hold the
// objectives' thresholds (docs/spec.md#metrics: 2 s, 5 s, 60 s, 120 s) exactly, so
// histogram_quantile compares against them without interpolation error at
// the bound, and reach the run timeout (600 s) and the retry schedule.
var buckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// DefaultScrapeTimeout bounds one read of the queue at scrape time.
const DefaultScrapeTimeout = 5 * time.Second

// Option configures New.
type Option func(*options)

type options struct {
	tenant     string
	maxTenants int
	timeout    time.Duration
	log        *slog.Logger
}

// Tenant sets the tenant_id label of the gwi_* run metrics of the
// default tenant's runs (docs/spec.md#metrics); default "". Another
// tenant's runs are labelled with their tenant (MaxTenants).
func Tenant(id string) Option { return func(o *options) { o.tenant = id } }

// DefaultMaxTenants is how many tenants' own tenant_id label values a
// Metrics exports by default (MaxTenants).
const DefaultMaxTenants = 100

// MaxTenants bounds the tenant_id label values of the run metrics, so
// that the series a Worker exports stay bounded however many tenants it
// serves: the first n tenants seen (the default tenant aside) are
// labelled by name, the rest "other". Default DefaultMaxTenants.
func MaxTenants(n int) Option { return func(o *options) { o.maxTenants = n } }

// ScrapeTimeout bounds the queue read of one scrape (WatchQueue); default
// DefaultScrapeTimeout. A read that runs out reports an error, never hangs
// the scrape.
func ScrapeTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Logger receives the queue collector's read errors; default slog.Default().
func Logger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Metrics records Conveyor's metrics. It implements run.Metrics (with
// RecordQuarantined, StepAbandoned and StepFinished) and jobqueue.Metrics
// (with LeaseLost, RecordQuarantined and HandlerAbandoned), and is safe for
// concurrent use.
type Metrics struct {
	reg  prometheus.Registerer
	opts options

	// tenants are the tenants labelled by name (tenantLabel).
	tenantsMu sync.Mutex
	tenants   map[string]bool

	runTransitions      *prometheus.CounterVec
	runAgentTransitions *prometheus.CounterVec
	runDuration         *prometheus.HistogramVec
	idempotency         *prometheus.CounterVec
	stepDuration        *prometheus.HistogramVec
	stepsAbandoned      *prometheus.CounterVec
	quarantined         *prometheus.CounterVec

	jobTransitions    *prometheus.CounterVec
	jobStateDuration  *prometheus.HistogramVec
	jobDuration       *prometheus.HistogramVec
	jobsDead          *prometheus.CounterVec
	jobRetries        *prometheus.CounterVec
	jobFailedAttempts *prometheus.CounterVec
	jobLeaseLosses    *prometheus.CounterVec
	handlersAbandoned *prometheus.CounterVec

	slotsFired      *prometheus.CounterVec
	slotsSkipped    *prometheus.CounterVec
	slotsDuplicated *prometheus.CounterVec

	retentionDeleted *prometheus.CounterVec
	retentionKeys    prometheus.Counter
	retentionPasses  *prometheus.CounterVec
	retentionLast    prometheus.Gauge
}

var (
	_ run.Metrics      = (*Metrics)(nil)
	_ jobqueue.Metrics = (*Metrics)(nil)
	_ schedule.Metrics = (*Metrics)(nil)

	_ retention.Metrics = (*Metrics)(nil)
)

// New creates the metrics and registers them with reg. It fails when reg
// already holds metrics of the same names.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	m := &Metrics{reg: reg, opts: options{timeout: DefaultScrapeTimeout, maxTenants: DefaultMaxTenants}, tenants: map[string]bool{}}
	for _, o := range opts {
		o(&m.opts)
	}
	if m.opts.log == nil {
		m.opts.log = slog.Default()
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	m.runTransitions = counter("gwi_run_transitions_total", "Run status transitions.", "from_state", "to_state", "tenant_id")
	m.runAgentTransitions = counter("conveyor_run_transitions_total", "Run status transitions by agent.", "agent", "from_state", "to_state")
	m.runDuration = histogram("gwi_run_duration_seconds", "Run duration by outcome; type is the agent.", "type", "status", "tenant_id")
	m.idempotency = counter("gwi_idempotency_hits_total", "Idempotency key lookups, result hit or miss.", "source", "result")
	m.stepDuration = histogram("conveyor_run_step_duration_seconds", "Run step durations by final status.", "agent", "step", "status")
	m.stepsAbandoned = counter("conveyor_run_steps_abandoned_total", "Run step attempts abandoned at their deadline while their code ran on.", "agent", "step")
	m.quarantined = counter("conveyor_records_quarantined_total", "Poison records moved to quarantine, by kind.", "kind")
	m.jobTransitions = counter("conveyor_job_transitions_total", "Job machine moves.", "job_type", "from_state", "to_state")
	m.jobStateDuration = histogram("conveyor_job_state_duration_seconds", "Time a job spent in a state, observed when it left it.", "job_type", "state")
	m.jobDuration = histogram("conveyor_job_duration_seconds", "Job end-to-end time, created to COMPLETE, DEAD or CANCELLED.", "job_type", "outcome")
	m.jobsDead = counter("conveyor_jobs_dead_total", "Jobs gone DEAD.", "job_type")
	m.jobRetries = counter("conveyor_job_retries_total", "Job retries: RETRY_BACKOFF → QUEUED.", "job_type")
	m.jobFailedAttempts = counter("conveyor_job_failed_attempts_total", "Failed job attempts by pipeline step and error_code.", "job_type", "step", "code")
	m.jobLeaseLosses = counter("conveyor_job_lease_losses_total", "Jobs rescued after their worker's lease ran out.", "job_type")
	m.handlersAbandoned = counter("conveyor_job_handlers_abandoned_total", "Job handler calls abandoned at StepTimeout while their code ran on.", "job_type", "step")
	m.slotsFired = counter("conveyor_schedule_slots_fired_total", "Schedule slots whose run this process started; caught_up: a missed slot.", "schedule", "caught_up")
	m.slotsSkipped = counter("conveyor_schedule_slots_skipped_total", "Schedule slots skipped by the missed-slot policy or a pause.", "schedule")
	m.slotsDuplicated = counter("conveyor_schedule_duplicates_suppressed_total", "Schedule slots another process had fired already.", "schedule")
	m.retentionDeleted = counter("conveyor_retention_records_deleted_total", "Finished records the retention janitor deleted, by kind.", "kind")
	m.retentionKeys = prometheus.NewCounter(prometheus.CounterOpts{Name: "conveyor_retention_keys_deleted_total", Help: "Keys the retention janitor deleted."})
	m.retentionPasses = counter("conveyor_retention_passes_total", "Retention janitor calls that held the lease, result done or partial.", "result")
	m.retentionLast = prometheus.NewGauge(prometheus.GaugeOpts{Name: "conveyor_retention_last_pass_timestamp_seconds", Help: "When this process last finished a retention pass (Unix seconds)."})
	for _, c := range []prometheus.Collector{
		m.retentionDeleted, m.retentionKeys, m.retentionPasses, m.retentionLast,
		m.runTransitions, m.runAgentTransitions, m.runDuration, m.idempotency, m.stepDuration, m.stepsAbandoned, m.quarantined,
		m.jobTransitions, m.jobStateDuration, m.jobDuration, m.jobsDead, m.jobRetries, m.jobFailedAttempts,
		m.jobLeaseLosses, m.handlersAbandoned, m.slotsFired, m.slotsSkipped, m.slotsDuplicated,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	registerRuntime(reg)
	return m, nil
}

// registerRuntime registers the Go runtime's and the process's collectors
// (go_*, process_*) with reg. A registry that has its own already (the
// default one of client_golang, or a program's, perhaps with other
// options) keeps them: any refusal is taken to mean that, so a registry
// given to several Clients, or one a program fills itself, never fails
// here.
func registerRuntime(reg prometheus.Registerer) {
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		_ = reg.Register(c)
	}
}

// ---- schedule.Metrics ----

// SlotFired counts a slot whose run this process started.
func (m *Metrics) SlotFired(schedule string, caughtUp bool) {
	m.slotsFired.WithLabelValues(schedule, strconv.FormatBool(caughtUp)).Inc()
}

// SlotSkipped counts slots skipped by the missed-slot policy or a pause.
func (m *Metrics) SlotSkipped(schedule string, n int) {
	m.slotsSkipped.WithLabelValues(schedule).Add(float64(n))
}

// DuplicateSuppressed counts a slot another process had fired already.
func (m *Metrics) DuplicateSuppressed(schedule string) {
	m.slotsDuplicated.WithLabelValues(schedule).Inc()
}

// ---- run.Metrics ----

// RunTransition counts a run status write twice: under the platform's
// name, whose labels are from_state, to_state and tenant_id only, and by
// agent (conveyor_run_transitions_total). The machine is not a label: the
// agent names it.
func (m *Metrics) RunTransition(agent, machine, from, to string) {
	m.RunTransitionOf("", agent, machine, from, to)
}

// RunTransitionOf is RunTransition of a run of tenant ("": the default).
func (m *Metrics) RunTransitionOf(tenant, agent, _, from, to string) {
	m.runTransitions.WithLabelValues(from, to, m.tenantLabel(tenant)).Inc()
	m.runAgentTransitions.WithLabelValues(agent, from, to).Inc()
}

// RunFinished observes a run's duration; the agent is the metric's type.
func (m *Metrics) RunFinished(agent, status string, d time.Duration) {
	m.RunFinishedOf("", agent, status, d)
}

// RunFinishedOf is RunFinished of a run of tenant ("": the default).
func (m *Metrics) RunFinishedOf(tenant, agent, status string, d time.Duration) {
	m.runDuration.WithLabelValues(agent, status, m.tenantLabel(tenant)).Observe(d.Seconds())
}

// tenantLabel is the tenant_id label of tenant's runs: the Tenant option
// for the default tenant, the tenant's name for the first MaxTenants
// named, "other" past them.
func (m *Metrics) tenantLabel(tenant string) string {
	if tenant == "" {
		return m.opts.tenant
	}
	m.tenantsMu.Lock()
	defer m.tenantsMu.Unlock()
	if m.tenants[tenant] {
		return tenant
	}
	if len(m.tenants) >= m.opts.maxTenants {
		return "other"
	}
	m.tenants[tenant] = true
	return tenant
}

// Idempotency counts a lookup of an idempotency key.
func (m *Metrics) Idempotency(source string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.idempotency.WithLabelValues(source, result).Inc()
}

// StepFinished observes a run step's duration by its final status.
func (m *Metrics) StepFinished(agent, step, status string, d time.Duration) {
	m.stepDuration.WithLabelValues(agent, step, status).Observe(d.Seconds())
}

// StepAbandoned counts a run step attempt abandoned at its deadline.
func (m *Metrics) StepAbandoned(agent, step string) {
	m.stepsAbandoned.WithLabelValues(agent, step).Inc()
}

// RecordQuarantined counts a poison record quarantined by a Runner or a
// Queue; the kinds of the two do not overlap.
func (m *Metrics) RecordQuarantined(kind string) { m.quarantined.WithLabelValues(kind).Inc() }

// ---- retention.Metrics ----

// RetentionPass counts the work of one janitor call that held the lease.
func (m *Metrics) RetentionPass(r retention.Report) {
	for k, n := range r.Deleted {
		m.retentionDeleted.WithLabelValues(string(k)).Add(float64(n))
	}
	m.retentionKeys.Add(float64(r.Keys))
	result := "partial"
	if r.Done {
		result = "done"
		m.retentionLast.Set(float64(r.Ended.UnixNano()) / 1e9)
	}
	m.retentionPasses.WithLabelValues(result).Inc()
}

// ---- jobqueue.Metrics ----

// JobTransition counts a job move and observes the time spent in from.
// Creation (from "") and PENDING, which a job leaves in the write that
// creates it, have no time to observe.
func (m *Metrics) JobTransition(jobType lifecycle.JobType, from, to lifecycle.JobState, inFrom time.Duration) {
	t := string(jobType)
	m.jobTransitions.WithLabelValues(t, string(from), string(to)).Inc()
	if from != "" && from != lifecycle.JobPending {
		m.jobStateDuration.WithLabelValues(t, string(from)).Observe(inFrom.Seconds())
	}
	if from == lifecycle.JobRetryBackoff && to == lifecycle.JobQueued {
		m.jobRetries.WithLabelValues(t).Inc()
	}
}

// JobFinished observes a job's end-to-end time and counts a dead job.
func (m *Metrics) JobFinished(jobType lifecycle.JobType, outcome lifecycle.JobState, d time.Duration) {
	m.jobDuration.WithLabelValues(string(jobType), string(outcome)).Observe(d.Seconds())
	if outcome == lifecycle.JobDead {
		m.jobsDead.WithLabelValues(string(jobType)).Inc()
	}
}

// AttemptFailed counts a failed attempt by step and error code.
func (m *Metrics) AttemptFailed(jobType lifecycle.JobType, step lifecycle.JobState, code string) {
	m.jobFailedAttempts.WithLabelValues(string(jobType), string(step), code).Inc()
}

// LeaseLost counts a job rescued after its lease ran out.
func (m *Metrics) LeaseLost(jobType lifecycle.JobType) {
	m.jobLeaseLosses.WithLabelValues(string(jobType)).Inc()
}

// HandlerAbandoned counts a job handler call abandoned at StepTimeout.
func (m *Metrics) HandlerAbandoned(jobType lifecycle.JobType, step lifecycle.JobState) {
	m.handlersAbandoned.WithLabelValues(string(jobType), string(step)).Inc()
}

// ---- the runs at scrape time ----

// RunsReader is what WatchRuns reads; *run.Runner is one.
type RunsReader interface {
	ActiveRuns(ctx context.Context) (map[string]int, error)
}

// WatchRuns registers, with the Registerer given to New, a collector that
// reads the runs not yet terminal from the store at every scrape
// (run.Runner.ActiveRuns: a list of the active index and a read per active
// run) and exports gwi_run_active_gauge by status. The gauge is the
// store's state, never moved by this process's writes, so it stays right
// across restarts and with several runners on one store. The read is
// bounded by ScrapeTimeout: when it fails or runs out, the scrape goes on
// without the gauge, conveyor_run_scrape_errors_total counts it and the
// Logger says why. One reader per Metrics.
//
// A reader that also counts by tenant (run.Runner.ActiveRunsByTenant) is
// read for every tenant, each labelled as the run metrics are
// (MaxTenants).
func (m *Metrics) WatchRuns(r RunsReader) error {
	return m.reg.Register(&runsCollector{r: r, label: m.tenantLabel, timeout: m.opts.timeout, log: m.opts.log})
}

// tenantRunsReader is a RunsReader that counts by tenant.
type tenantRunsReader interface {
	ActiveRunsByTenant(ctx context.Context) (map[string]map[string]int, error)
}

var (
	activeDesc = prometheus.NewDesc("gwi_run_active_gauge",
		"Runs not yet terminal by status, read from the store at scrape time.",
		[]string{"status", "tenant_id"}, nil)
	runScrapeErrorsDesc = prometheus.NewDesc("conveyor_run_scrape_errors_total",
		"Scrapes whose read of the runs failed or ran out of time; gwi_run_active_gauge is missing from those scrapes.", nil, nil)
)

type runsCollector struct {
	r       RunsReader
	label   func(tenant string) string // Metrics.tenantLabel
	timeout time.Duration
	log     *slog.Logger
	errors  atomic.Int64
}

func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- activeDesc
	ch <- runScrapeErrorsDesc
}

func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	by, err := c.read(ctx)
	if err != nil {
		n := c.errors.Add(1)
		c.log.Warn("prometheus: reading the runs for a scrape", "err", err, "errors", n)
	}
	ch <- prometheus.MustNewConstMetric(runScrapeErrorsDesc, prometheus.CounterValue, float64(c.errors.Load()))
	if err != nil {
		return
	}
	// Tenants past the bound share "other": their counts are summed.
	sums := map[[2]string]int{}
	for tenant, counts := range by {
		for status, n := range counts {
			sums[[2]string{status, c.label(tenant)}] += n
		}
	}
	for k, n := range sums {
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

// read is the counts by tenant: every tenant's where the reader counts
// by tenant, else the default tenant's.
func (c *runsCollector) read(ctx context.Context) (map[string]map[string]int, error) {
	if tr, ok := c.r.(tenantRunsReader); ok {
		return tr.ActiveRunsByTenant(lifecycle.WithTenant(ctx, lifecycle.AllTenants))
	}
	counts, err := c.r.ActiveRuns(ctx)
	return map[string]map[string]int{"": counts}, err
}

// ---- the queue at scrape time ----

// QueueReader is what WatchQueue reads; *jobqueue.Queue is one.
type QueueReader interface {
	Depths(ctx context.Context) ([]jobqueue.AgentDepth, error)
}

// WatchQueue registers, with the Registerer given to New, a collector that
// reads q's ready lanes at every scrape (jobqueue.Queue.Depths: its cost is
// the work waiting, not the jobs ever run) and exports
// conveyor_queue_depth and conveyor_queue_oldest_ready_age_seconds per
// agent. The read is bounded by ScrapeTimeout: when it fails or runs out,
// the scrape goes on without the queue gauges, conveyor_queue_scrape_errors_total
// counts it and the Logger says why. One queue per Metrics: queues
// sharing a store read the same lanes.
func (m *Metrics) WatchQueue(q QueueReader) error {
	return m.reg.Register(&queueCollector{q: q, timeout: m.opts.timeout, log: m.opts.log})
}

var (
	depthDesc = prometheus.NewDesc("conveyor_queue_depth",
		"Jobs waiting in an agent's ready lane: state ready (due now, not yet picked up) or waiting (in RETRY_BACKOFF).",
		[]string{"agent", "state"}, nil)
	ageDesc = prometheus.NewDesc("conveyor_queue_oldest_ready_age_seconds",
		"How long the agent's oldest ready job has waited for a worker; 0 when none is ready (alert: QUEUED > 5 min).",
		[]string{"agent"}, nil)
	scrapeErrorsDesc = prometheus.NewDesc("conveyor_queue_scrape_errors_total",
		"Scrapes whose read of the job queue failed or ran out of time; the queue gauges are missing from those scrapes.", nil, nil)
)

type queueCollector struct {
	q       QueueReader
	timeout time.Duration
	log     *slog.Logger
	errors  atomic.Int64 // reads that failed, since registration
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthDesc
	ch <- ageDesc
	ch <- scrapeErrorsDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	depths, err := c.q.Depths(ctx)
	if err != nil {
		n := c.errors.Add(1)
		c.log.Warn("prometheus: reading the job queue for a scrape", "err", err, "errors", n)
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorsDesc, prometheus.CounterValue, float64(c.errors.Load()))
	if err != nil {
		return
	}
	for _, d := range depths {
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(d.Ready), d.Agent, "ready")
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(d.Waiting), d.Agent, "waiting")
		ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, d.Age.Seconds(), d.Agent)
	}
}
