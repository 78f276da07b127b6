package jobqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// Defaults of Config.
const (
	DefaultMaxAttempts = 3
	DefaultLeaseTTL    = 30 * time.Second
	DefaultStepTimeout = 120 * time.Second
	DefaultStopGrace   = 10 * time.Second
	DefaultProject     = "default"
	DefaultSweepBatch  = 10000
)

// DefaultBackoff is the retry schedule (docs/spec.md#retries-and-timeouts): the wait in
// RETRY_BACKOFF after the first, second and third failed attempt.
func DefaultBackoff() []time.Duration {
	return []time.Duration{15 * time.Second, 30 * time.Second, 60 * time.Second}
}

// Config configures a Queue.
type Config struct {
	// Store holds the jobs, the ready lanes, the agent locks, the artifacts
	// and the audit log. Required.
	Store *storage.Store
	// Artifacts writes the artifact at ARTIFACT_WRITE. Default: an
	// artifact.Store over Store with the same Clock and Node, whose
	// Project is this Config's, so the artifact of a job without a
	// project_id is read with the job's empty project_id too (or with
	// Queue.Result).
	Artifacts *artifact.Store
	// Clock drives leases, backoff, step timeouts and timestamps. Default:
	// the wall clock.
	Clock clock.Clock
	// Node names this host in audit events. Default: "".
	Node string
	// Project is the cid artifacts go to when a job names none. Default:
	// DefaultProject ("default").
	Project string
	// MaxAttempts is max_attempts for jobs enqueued without one. Default: 3.
	MaxAttempts int
	// Backoff is the wait in RETRY_BACKOFF after failed attempt n
	// (Backoff[n-1]; the last entry repeats). Default: DefaultBackoff,
	// 15 s, 30 s, 60 s.
	Backoff []time.Duration
	// LeaseTTL is how long a claim lives without a heartbeat; a running job
	// renews it every LeaseTTL/3. Default: 30 s.
	LeaseTTL time.Duration
	// StepTimeout bounds each handler call. Default: 120 s (docs/spec.md#retries-and-timeouts).
	StepTimeout time.Duration
	// ArtifactActor is the actor ARTIFACT_WRITE writes the artifact as.
	// The authority matrix lets only the NLM backend write new artifacts, and the
	// artifact holds the NLM backend's answer, so the default is
	// lifecycle.ActorNLMBackend.
	ArtifactActor lifecycle.Actor
	// SweepBatch is the most entries of work in flight (agent locks, lane
	// entries) one SweepIfDue looks at; the next call goes on where it
	// stopped. Default 10,000. (Sweep itself looks at every one.)
	SweepBatch int
	// StopGrace bounds what a claim still does once its context ended (a
	// Worker stopping): recording the interrupted attempt and releasing the
	// agent; and how long Worker.Run waits for handlers that ignore their
	// context before returning. Default: 10 s.
	StopGrace time.Duration
	// Logger receives what cannot be returned (audit write failures,
	// heartbeat trouble, quarantined records). Default: slog.Default().
	Logger *slog.Logger
	// Types registers job types of the user's, each with its Handler,
	// beside the three built-in NLM ones (RESEARCH, BRIEF,
	// PROPOSAL_PREPROCESS, run by Worker.Handlers): Enqueue accepts them, and
	// their artifact's type is the job type's name, its content checked by
	// the type's Validate. Names are ids (storage.ValidateID) and may not
	// be a built-in type's. With Config.Artifacts set, that store must know
	// the types (artifact.Config.Types); the default store is given them.
	Types map[lifecycle.JobType]TypeConfig
	// Metrics receives the job metrics of docs/spec.md#metrics (see Metrics);
	// default none.
	Metrics Metrics
	// TracerProvider receives the spans of enqueues, job attempts and
	// handler calls (docs/spec.md#tracing). Default none: no spans, at no
	// cost; a job still keeps the trace context its enqueue carried.
	TracerProvider trace.TracerProvider
}

// TypeConfig is a user job type (Config.Types).
type TypeConfig struct {
	// Handler runs the type's jobs (HandlerFunc, or Typed for a payload
	// decoded into a Go type). Nil means the Handler given to Claim.Run
	// (the Worker's Handlers).
	Handler Handler
	// Validate checks the content of the type's artifact, which must be
	// JSON; nil accepts any JSON. An error sends the job to RETRY_BACKOFF
	// from ARTIFACT_WRITE (wrap it with Permanent to skip the retries).
	Validate func(content json.RawMessage) error
}

// Queue is the job queue (docs/spec.md#job-lifecycle) over a Store. Many Queues in many
// processes may share one Store: all coordination goes through conditional
// writes. It is safe for concurrent use.
type Queue struct {
	cfg       Config
	store     *storage.Store
	artifacts *artifact.Store
	clock     clock.Clock
	log       *slog.Logger
	tracer    tracing.Tracer
	units     *core.Units // the handlers' calls, under StepTimeout
	userTypes map[lifecycle.JobType]bool

	quar *core.Quarantiner // poison records to quarantine, logged and counted
	// absent holds the jobs read missing on a store that settles, until
	// their absence is confirmed (settle.go); settles at once elsewhere.
	absent core.Absence

	mu       sync.Mutex
	agents   map[string]*agentState // every agent this Queue knows of
	agentAt  time.Time              // when the agents' locks were last listed
	globalAt time.Time              // when refreshLanes last listed every lane
	listCost time.Duration          // how long that listing took (relistCost)
	newWork  int64                  // listings that found new work (foundWork)
	listGen  atomic.Uint64          // lane listings begun (deleteLane)
	// lanesDirty: the store's watch signalled a lane change since.
	lanesDirty bool
	// lanesPoll: a Worker over a store without a watch polls the lanes
	// soon after it last found work (busyPoll).
	lanesPoll bool
	audited   map[string]int64 // job id → latest version whose audit this Queue wrote
	gaps      map[string]int64 // job id → version at rest whose audit flush failed (active.go)

	waits waitSet // the Wait calls, woken by this Queue's writes of their job

	schedMu sync.Mutex
	due     dueHeap       // the agents by when each is next worth a look
	wake    chan struct{} // closed when an agent becomes due sooner (see nextDue)
}

// New checks cfg, fills in its defaults and returns a Queue. A Config it
// refuses gives an error matching ErrInvalidConfig.
func New(cfg Config) (*Queue, error) {
	if err := fillConfig(&cfg); err != nil {
		return nil, err
	}
	contentTypes, err := typeValidators(cfg.Types)
	if err != nil {
		return nil, err
	}
	// Every store call waits out transient failures for as long as its
	// context allows (storage.Store.Patient); the claim's and the sweep's contexts
	// carry the deadlines.
	store := cfg.Store.Patient(storage.Retry{Clock: cfg.Clock, Log: cfg.Logger})
	if cfg.Artifacts == nil {
		a, err := artifact.New(artifact.Config{Store: store, Clock: cfg.Clock, Node: cfg.Node, Logger: cfg.Logger, Types: contentTypes, Project: cfg.Project})
		if err != nil {
			return nil, err
		}
		cfg.Artifacts = a
	}
	userTypes := map[lifecycle.JobType]bool{}
	for t := range cfg.Types {
		userTypes[t] = true
	}
	return &Queue{userTypes: userTypes,
		cfg: cfg, store: store, artifacts: cfg.Artifacts, clock: cfg.Clock, log: cfg.Logger,
		tracer: tracing.New(cfg.TracerProvider),
		units:  &core.Units{Clock: cfg.Clock, Log: cfg.Logger},
		quar:   &core.Quarantiner{Store: store, Clock: cfg.Clock, Log: cfg.Logger},
		agents: map[string]*agentState{}, audited: map[string]int64{},
		absent: core.Absence{Settle: storage.SettleTime(store)},
	}, nil
}

// fillConfig checks cfg and fills in its defaults, in New's order.
func fillConfig(cfg *Config) error {
	if cfg.Store == nil {
		return fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Project == "" {
		cfg.Project = DefaultProject
	}
	if err := storage.ValidateID("project id", cfg.Project); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.MaxAttempts < 1 {
		return fmt.Errorf("%w: MaxAttempts %d < 1", ErrInvalidConfig, cfg.MaxAttempts)
	}
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = DefaultBackoff()
	}
	for _, d := range cfg.Backoff {
		if d < 0 {
			return fmt.Errorf("%w: negative Backoff %s", ErrInvalidConfig, d)
		}
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.StepTimeout == 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.LeaseTTL < 3*time.Millisecond || cfg.StepTimeout < 0 {
		return fmt.Errorf("%w: LeaseTTL %s below 3ms or negative StepTimeout %s", ErrInvalidConfig, cfg.LeaseTTL, cfg.StepTimeout)
	}
	if cfg.SweepBatch == 0 {
		cfg.SweepBatch = DefaultSweepBatch
	}
	if cfg.SweepBatch < 0 {
		return fmt.Errorf("%w: SweepBatch %d < 0", ErrInvalidConfig, cfg.SweepBatch)
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.StopGrace < 0 {
		return fmt.Errorf("%w: negative StopGrace %s", ErrInvalidConfig, cfg.StopGrace)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.ArtifactActor == "" {
		cfg.ArtifactActor = lifecycle.ActorNLMBackend
	}
	return nil
}

// typeValidators checks the user job types and returns their artifacts'
// content checks, by artifact type.
func typeValidators(types map[lifecycle.JobType]TypeConfig) (map[artifact.Type]func(json.RawMessage) error, error) {
	contentTypes := map[artifact.Type]func(json.RawMessage) error{}
	for t, tc := range types {
		if err := storage.ValidateID("job type", string(t)); err != nil {
			return nil, fmt.Errorf("%w: Types: %w", ErrInvalidConfig, err)
		}
		if _, builtin := ArtifactType(t); builtin {
			return nil, fmt.Errorf("%w: Types: %s is a built-in job type", ErrInvalidConfig, t)
		}
		contentTypes[artifact.Type(t)] = tc.Validate
	}
	return contentTypes, nil
}

// Stragglers reports how many handler calls abandoned at StepTimeout (or at
// shutdown) are still running, and how many were abandoned in all. Go
// cannot stop a goroutine that ignores its context; the queue counts them,
// logs unit_abandoned and unit_returned_late, and drops their results.
func (q *Queue) Stragglers() (live int, total int64) { return q.units.Stragglers() }

// Artifacts returns the artifact store the queue writes to.
func (q *Queue) Artifacts() *artifact.Store { return q.artifacts }

// Errors of the queue. Bad input matches ErrInvalidJob; refusals of the
// authority matrix match authority.ErrForbidden.
var (
	// ErrInvalidConfig: a Config that New refuses.
	ErrInvalidConfig = errors.New("jobqueue: invalid config")
	// ErrInvalidJob: a NewJob that breaks a rule of Enqueue.
	ErrInvalidJob = errors.New("jobqueue: invalid job")
	// ErrJobExists: Enqueue with the id of a job that already exists.
	ErrJobExists = lifecycle.ErrJobExists
	// ErrLeaseLost: the worker's lease on the job lapsed or was taken over;
	// it may no longer write the job. It is records.ErrLeaseLost, the one
	// sentinel of the SDK.
	ErrLeaseLost = records.ErrLeaseLost
	// ErrStepTimeout is the cause of a step's context when StepTimeout runs out.
	ErrStepTimeout = errors.New("jobqueue: step timeout")
)
