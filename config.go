package conveyor

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// ErrInvalidConfig matches every error New returns for a Config it cannot
// build a Client from, the engines' own refusals included.
var ErrInvalidConfig = errors.New("conveyor: invalid config")

// DefaultInboxExpiry is how often a Client expires the inbox entries past
// their TTL unless Config.InboxExpiry says otherwise.
const DefaultInboxExpiry = time.Minute

// Config is everything a Client is built from. Only Store is required.
//
// The fields shared by the engines (Store, Clock, Logger, Owner, Node,
// TracerProvider, Metrics) are given once here and handed to each engine;
// the engines' own configs below carry only their tuning, and setting a
// shared field in one of them is an error. Every zero value has the
// default documented on the engine's own Config.
type Config struct {
	// Store holds every record. Required.
	Store *storage.Store
	// Clock drives leases, timeouts, schedules and timestamps. Default:
	// the wall clock.
	Clock clock.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Owner names this process in leases: distinct per process sharing
	// Store. Default: the host and the executable's
	// name, stable across restarts so a restarted process takes its own
	// runs back at once. The parts whose ids take no "/" (the NLM
	// processor, the job worker, the retention janitor) get it with each
	// "/" replaced by ":".
	Owner string
	// Node names this host in audit events. Default: the host name.
	Node string
	// TracerProvider receives the spans of submits, runs, steps, jobs and
	// handlers (docs/spec.md#tracing). Default none: no spans, at no cost.
	// The caller owns it, and flushes it after Stop.
	TracerProvider trace.TracerProvider
	// Metrics, when set, gets Conveyor's metrics registered
	// (docs/spec.md#metrics), the queue's and the runs' gauges read at
	// scrape time included, each configured agent's and job type's series
	// at zero from the start, and the Go runtime and process collectors
	// (go_*, process_*) unless the registry holds its own (the default
	// registry of client_golang does: its stay). Give the same registry as
	// the HTTP server's Registerer for its request metrics. Default none.
	Metrics prometheus.Registerer

	// Agents are the agents the Runner executes.
	Agents []run.Agent
	// NLMAgents, when set, returns more agents, whose steps ask the NLM
	// processor (nlm.Ask); it is called once the processor exists, so it
	// needs NLMStages.
	NLMAgents func(p *nlm.Processor) []run.Agent
	// JobTypes registers job types of the caller's, each with its Handler
	// (jobqueue.Config.Types).
	JobTypes map[lifecycle.JobType]jobqueue.TypeConfig
	// JobHandlers run the NLM pipeline of the built-in job types
	// (jobqueue.Handlers). The job worker runs when it has something to
	// run: JobHandlers.CallNotebookLM or a JobTypes entry.
	JobHandlers jobqueue.Handlers
	// NLMStages are the NLM backend's pipeline: with Query set, the Client
	// builds and runs an NLM processor; without it, none.
	NLMStages nlm.Stages
	// Schedules are the scheduled runs (they need Agents) and periodic
	// jobs (a Schedule with Job set: its type is one of JobTypes or an
	// NLM type), each slot fired once across the processes sharing Store.
	Schedules []lifecycle.Schedule
	// Retention says what finished history is deleted. Its zero value
	// deletes nothing, and no pass runs.
	Retention RetentionConfig
	// InboxExpiry is how often inbox entries past their TTL are expired.
	// Default DefaultInboxExpiry; negative: never (another process does).
	InboxExpiry time.Duration
	// InboxJobs maps an inbox entry's action (intent.action) to the type of
	// the job the entry starts (docs/spec.md#inbox-jobs): each entry the
	// inbox accepts whose action is listed enqueues one job of that type,
	// whose id is derived from the entry's, so a retry enqueues it once;
	// the entry records the job's id and the job's payload the entry's.
	// Each type is one of JobTypes or an NLM type. Default none.
	InboxJobs map[string]lifecycle.JobType

	// SubmitOnly makes a Client that executes nothing: Start runs only the
	// retention janitor, and the engines serve submits, enqueues, reads and
	// control calls while other processes sharing Store execute.
	SubmitOnly bool
	// StoreCheck says what Start does with the check that Store keeps the
	// promises the engines rest on. Default StoreCheckRefuse.
	StoreCheck StoreCheck

	// The engines' own tuning. Each zero value is the engine's defaults.
	Runner    run.Config
	Queue     jobqueue.Config
	JobWorker JobWorkerConfig
	NLM       nlm.Config
	Scheduler SchedulerConfig
	Inbox     inbox.Config
}

// JobWorkerConfig tunes the job worker (jobqueue.Worker); its ID is the
// Client's Owner and its Handlers are Config.JobHandlers.
type JobWorkerConfig struct {
	// Slots is how many jobs run at once. Default 1.
	Slots int
	// PollInterval is the longest wait after finding no work. Default 1 s.
	PollInterval time.Duration
	// SweepInterval is how often the queue is swept across the workers
	// sharing the store; negative disables it. Default 1 min.
	SweepInterval time.Duration
}

// StoreCheck says what Start does with the start-up check of the store's
// semantics (docs/stores.md): a few requests under
// a folder of its own, removed afterwards.
type StoreCheck int

const (
	// StoreCheckRefuse refuses to start on a store that fails the check,
	// with an error matching ErrUnsafeStore that names the failed checks.
	StoreCheckRefuse StoreCheck = iota
	// StoreCheckWarn logs the failed checks (store_semantics_failed) and
	// starts anyway: exactly-once no longer holds.
	StoreCheckWarn
	// StoreCheckOff skips the check, for a store already checked.
	StoreCheckOff
)

// validate refuses a Config that sets a shared field in an engine's config,
// or that cannot be built.
func (c *Config) validate() error {
	if c.Store == nil {
		return fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	}
	if c.NLMAgents != nil && c.NLMStages.Query == nil {
		return fmt.Errorf("%w: NLMAgents needs NLMStages.Query (an NLM processor to ask)", ErrInvalidConfig)
	}
	if c.StoreCheck < StoreCheckRefuse || c.StoreCheck > StoreCheckOff {
		return fmt.Errorf("%w: StoreCheck %d is none of the StoreCheck values", ErrInvalidConfig, c.StoreCheck)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"Runner.Store", c.Runner.Store != nil}, {"Runner.Owner", c.Runner.Owner != ""},
		{"Runner.Clock", c.Runner.Clock != nil}, {"Runner.Logger", c.Runner.Logger != nil},
		{"Runner.Node", c.Runner.Node != ""}, {"Runner.Metrics", c.Runner.Metrics != nil},
		{"Runner.TracerProvider", c.Runner.TracerProvider != nil},
		{"Queue.Store", c.Queue.Store != nil}, {"Queue.Clock", c.Queue.Clock != nil},
		{"Queue.Logger", c.Queue.Logger != nil}, {"Queue.Node", c.Queue.Node != ""},
		{"Queue.Metrics", c.Queue.Metrics != nil}, {"Queue.TracerProvider", c.Queue.TracerProvider != nil},
		{"Queue.Types (use JobTypes)", c.Queue.Types != nil},
		{"NLM.Store", c.NLM.Store != nil}, {"NLM.Owner", c.NLM.Owner != ""}, {"NLM.Clock", c.NLM.Clock != nil},
		{"NLM.Logger", c.NLM.Logger != nil}, {"NLM.Node", c.NLM.Node != ""},
		{"Inbox.Store", c.Inbox.Store != nil}, {"Inbox.Clock", c.Inbox.Clock != nil},
		{"Inbox.Logger", c.Inbox.Logger != nil}, {"Inbox.Node", c.Inbox.Node != ""},
		{"Inbox.Dispatch (use InboxJobs)", c.Inbox.Dispatch != nil},
	} {
		if f.set {
			return fmt.Errorf("%w: %s is set by the Client from Config; leave it zero", ErrInvalidConfig, f.name)
		}
	}
	return nil
}
