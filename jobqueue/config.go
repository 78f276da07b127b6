package jobqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Defaults of Config.
const (
	defaultMaxAttempts = 3
	defaultLeaseTTL    = 30 * time.Second
	defaultStepTimeout = 120 * time.Second
	defaultStopGrace   = 10 * time.Second
	defaultSweepBatch  = 10000
	// maxMaxAttempts bounds max_attempts (NewJob.MaxAttempts).
	maxMaxAttempts = 100
)

// defaultBackoff is the retry schedule (docs/spec.md#retries-and-timeouts): the wait in
// RETRY_BACKOFF after the first, second and third failed attempt.
func defaultBackoff() []time.Duration {
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
	// lifecycle.DefaultProject ("default").
	Project string
	// MaxAttempts is max_attempts for jobs enqueued without one. Default: 3.
	MaxAttempts int
	// Backoff is the wait in RETRY_BACKOFF after failed attempt n
	// (Backoff[n-1]; the last entry repeats). Default: 15 s, 30 s, 60 s.
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
	// the type's Validate. Names are ids (storage.ErrInvalidID) and may not
	// be a built-in type's. With Config.Artifacts set, that store must know
	// the types (artifact.Config.Types); the default store is given them.
	Types map[lifecycle.JobType]TypeConfig
	// InsertMiddleware wraps every insert, first in the list outermost:
	// Enqueue and EnqueueMany, and so Insert, InsertJob, InsertMany, the
	// jobs of periodic schedules and the HTTP API's POST /jobs and
	// /jobs/batch. Each sees the jobs as the
	// caller gave them, before any is checked or written, after the
	// caller's actor was found allowed to create jobs; it may change them,
	// refuse them by returning an error without calling next, or act on
	// what next returns. The queue checks the jobs next hands it as any
	// others. An error is returned to the caller as it is, its code
	// lifecycle.ErrorCode's, and so is its HTTP status: wrap
	// lifecycle.ErrInvalidInput for a refusal of the input
	// (INVALID_INPUT, 400), return a *lifecycle.ForbiddenActorError for
	// FORBIDDEN (403) or any error with a Code method naming a code of
	// the table; anything else is INTERNAL_ERROR (500). A panic is
	// returned as an INTERNAL_ERROR naming it, nothing written. Default
	// none.
	InsertMiddleware []func(next InsertFunc) InsertFunc
	// WorkMiddleware wraps every handler call of the job types of
	// Config.Types, first in the list outermost (a type of its own only:
	// wrap its Handler). The wrapped call is the attempt's step: under the
	// type's Timeout, a panic in it a failed attempt, a middleware that
	// ignores its context left behind at the deadline as a handler is, and
	// an error it returns the attempt's (Permanent and StatusError as a
	// handler's). The NLM pipeline's two steps (Handlers, for RESEARCH,
	// BRIEF, PROPOSAL_PREPROCESS) are not wrapped: they are two calls of
	// two shapes on the spec's machine, and plain functions a caller wraps
	// itself. Default none.
	WorkMiddleware []func(next Handler) Handler
	// Metrics receives the job metrics of docs/spec.md#metrics (see Metrics);
	// default none.
	Metrics Metrics
	// TracerProvider receives the spans of enqueues, job attempts and
	// handler calls (docs/spec.md#tracing). Default none: no spans, at no
	// cost; a job still keeps the trace context its enqueue carried.
	TracerProvider trace.TracerProvider
	// RollingUpgrade keeps every job this Queue writes readable by Workers
	// of the previous release sharing its store, for as long as a rolling
	// upgrade lasts: a job of the user's types runs on the spec's job
	// machine (a previous Worker quarantines a job in RUNNING, a state it
	// does not know), and a priority other than the default is refused (a
	// previous Worker drops a lane entry it cannot read, leaving its job in
	// no lane); a job type's jobs run one at a time, under the one lock of
	// their lane a previous Worker knows, and a queue's pause is refused
	// (a previous Worker would not obey it). Turn it off once every Worker
	// runs this release. Default false.
	RollingUpgrade bool
	// Queues configures the named queues (NewJob.Queue, TypeConfig.Queue)
	// by name: each queue's cap on running jobs in this process. A queue
	// not here runs with no cap of its own; a queue exists by being named
	// by a job. Default none.
	Queues map[string]QueueConfig
	// CallbackAttempts is how often the callback of a job that ended
	// (NewJob.Callback; posted once the job is COMPLETE, DEAD or
	// CANCELLED) is tried before it is given up, recorded as a
	// job.callback.failed audit event of the job. Default 10.
	CallbackAttempts int
	// CallbackBackoff is the wait after a callback's first failed attempt,
	// doubling after each, up to a day (1 s, 2 s … 256 s with the
	// defaults: about 8.5 minutes in all). Default 1 s.
	CallbackBackoff time.Duration
	// CallbackTimeout bounds each callback attempt. Default 10 s.
	CallbackTimeout time.Duration
	// CallbackClient posts the callbacks; a copy is used, which follows no
	// redirect unless the client sets its own CheckRedirect (a 3xx answer
	// is then a failed attempt, and a redirect cannot lead past
	// CallbackHosts). Default: an *http.Client.
	CallbackClient *http.Client
	// CallbackHosts, when set, are the only hosts a callback URL may name
	// (host names or IP addresses, without a port, any case): a job naming
	// another is refused with INVALID_INPUT, and an entry already written
	// for one is given up. A callback is the caller's URL, fetched from
	// the Worker's network. Default none: any host.
	CallbackHosts []string
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
	// MaxAttempts is max_attempts for the type's jobs inserted without
	// one, 1 to 100, recorded on each job when it is inserted: a later
	// change of it does not touch jobs already inserted. Default
	// Config.MaxAttempts.
	MaxAttempts int
	// Timeout bounds each call of the type's Handler (with
	// Config.WorkMiddleware around it): at the deadline the attempt fails
	// with error_code TIMEOUT whether or not the handler returns, and one
	// that ignores its context is left behind, its result dropped. The
	// artifact write keeps Config.StepTimeout. Default Config.StepTimeout.
	Timeout time.Duration
	// Backoff is the wait in RETRY_BACKOFF after the type's failed attempt
	// n (Backoff[n-1]; the last entry repeats). Default Config.Backoff.
	Backoff []time.Duration
	// BackoffFunc, when set, is the wait after a failed attempt instead of
	// Backoff: it is given the job as failed (its Attempt, ErrorCode and
	// Error set) and may be called more than once for one failure (a
	// write retried on a conflict), so it should return the same wait for
	// the same job. A negative wait is none. The wait is the Worker's that
	// records the failure, read then: a change of it applies to the next
	// failure of jobs in flight. Default none.
	BackoffFunc func(job lifecycle.Job) time.Duration
	// Queue is the queue the type's jobs run in when they name neither an
	// agent nor a queue. Default "default".
	Queue string
	// MaxRunning is the most jobs of the type one process runs at once.
	// Default 0: as many as its Worker's Slots.
	MaxRunning int
	// MaxRunningGlobal is the most jobs of the type (of one queue) that
	// run at once across every process sharing the store; 1 runs them one
	// at a time, as an agent's. Default 0: no cap across processes (at
	// most 1,024). Ignored while RollingUpgrade is on: one at a time, as
	// the previous release ran them.
	MaxRunningGlobal int
}

// InsertFunc inserts jobs: the queue's own insert, or the next of
// Config.InsertMiddleware. It returns the jobs as written.
type InsertFunc func(ctx context.Context, jobs []NewJob) ([]lifecycle.Job, error)

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
		cfg.Project = lifecycle.DefaultProject
	}
	if err := storekey.ValidateID("project id", cfg.Project); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = defaultMaxAttempts
	}
	if cfg.MaxAttempts < 1 {
		return fmt.Errorf("%w: MaxAttempts %d < 1", ErrInvalidConfig, cfg.MaxAttempts)
	}
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = defaultBackoff()
	}
	for _, d := range cfg.Backoff {
		if d < 0 {
			return fmt.Errorf("%w: negative Backoff %s", ErrInvalidConfig, d)
		}
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = defaultLeaseTTL
	}
	if cfg.StepTimeout == 0 {
		cfg.StepTimeout = defaultStepTimeout
	}
	if cfg.LeaseTTL < 3*time.Millisecond || cfg.StepTimeout < 0 {
		return fmt.Errorf("%w: LeaseTTL %s below 3ms or negative StepTimeout %s", ErrInvalidConfig, cfg.LeaseTTL, cfg.StepTimeout)
	}
	if cfg.SweepBatch == 0 {
		cfg.SweepBatch = defaultSweepBatch
	}
	if cfg.SweepBatch < 0 {
		return fmt.Errorf("%w: SweepBatch %d < 0", ErrInvalidConfig, cfg.SweepBatch)
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = defaultStopGrace
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
	if err := fillCallbacks(cfg); err != nil {
		return err
	}
	return checkCaps(cfg)
}

// typeValidators checks the user job types and returns their artifacts'
// content checks, by artifact type.
func typeValidators(types map[lifecycle.JobType]TypeConfig) (map[artifact.Type]func(json.RawMessage) error, error) {
	contentTypes := map[artifact.Type]func(json.RawMessage) error{}
	for t, tc := range types {
		if err := storekey.ValidateID("job type", string(t)); err != nil {
			return nil, fmt.Errorf("%w: Types: %w", ErrInvalidConfig, err)
		}
		if _, builtin := artifact.TypeForJob(t); builtin {
			return nil, fmt.Errorf("%w: Types: %s is a built-in job type", ErrInvalidConfig, t)
		}
		if err := checkTypeRetries(t, tc); err != nil {
			return nil, err
		}
		contentTypes[artifact.Type(t)] = tc.Validate
	}
	return contentTypes, nil
}

// stopGrace is Config.StopGrace: how long what must still be written once
// a caller's context ended (a Worker stopping) may take.
type stopGrace time.Duration

// after is the context for what is still written once ctx may have ended
// (the interrupted attempt, the agent's release, an audit flush): not
// canceled with ctx, but bounded by StopGrace, so a store outage during
// shutdown cannot hold the Worker.
func (g stopGrace) after(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), time.Duration(g))
}

// defaultProject is Config.Project, the cid of the artifact of a job
// without a project_id.
type defaultProject string

// of is the cid of job's artifact: its project_id, else Config.Project.
func (p defaultProject) of(job lifecycle.Job) string {
	if job.ProjectID != "" {
		return job.ProjectID
	}
	return string(p)
}

// checkTypeRetries checks the attempts, timeout and backoff of user job
// type t.
func checkTypeRetries(t lifecycle.JobType, tc TypeConfig) error {
	if tc.MaxAttempts < 0 || tc.MaxAttempts > maxMaxAttempts {
		return fmt.Errorf("%w: Types[%s].MaxAttempts %d outside 1..%d", ErrInvalidConfig, t, tc.MaxAttempts, maxMaxAttempts)
	}
	if tc.Timeout < 0 {
		return fmt.Errorf("%w: Types[%s].Timeout %s is negative", ErrInvalidConfig, t, tc.Timeout)
	}
	for _, d := range tc.Backoff {
		if d < 0 {
			return fmt.Errorf("%w: Types[%s].Backoff %s is negative", ErrInvalidConfig, t, d)
		}
	}
	return nil
}
