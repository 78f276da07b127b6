package run

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/runconveyor/conveyor/internal/procid"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"go.opentelemetry.io/otel/trace"
)

// Step is one unit of an agent's work. The Runner calls Run; it never gives
// step code anything that can write status.
type Step struct {
	// Name becomes part of the step file's key, steps/NN-name.json, so it must
	// be a valid id (storage.ErrInvalidID).
	Name string
	// Run does the step's work. It must return when ctx is done; the
	// Runner stops waiting for it then (at a step timeout, a cancellation,
	// the run timeout or a lost lease) and discards a late result.
	Run func(ctx context.Context, in StepInput) (StepOutput, error)
	// Resumable: after a crash, a completed step can be skipped and its
	// checkpointed output reused (docs/spec.md#checkpoint).
	Resumable bool
	// Idempotent: the step can safely run again after a crash.
	Idempotent bool
	// Timeout bounds one attempt; 0 means Config.StepTimeout. It bounds
	// each attempt of Compensate too.
	Timeout time.Duration
	// After names the steps this one depends on, each declared before it.
	// An agent with any After is a graph: a step runs once every step it
	// depends on is done (completed or skipped), steps with nothing left
	// to wait for run at once, side by side, and a step is skipped when
	// none of its dependencies completed and chose it (StepOutput.Next).
	// A step of a graph with no After starts the run. Without any After
	// the steps run one after another in the order given.
	After []string
	// Compensate, when set, undoes the step once it completed: it runs
	// when the run is canceled (or fails, with Agent.CompensateOnFailure)
	// after this step completed, the completed steps' compensations in
	// reverse order of completion, before the run ends
	// (docs/spec.md#compensation). It is retried like Run and may run more
	// than once (a crash during it runs it again), so it must be
	// idempotent. Only the cancel-aware and approval machines compensate.
	Compensate func(ctx context.Context, in CompensateInput) error
	// CompensateAction names the compensation in the run's
	// compensation_log; default "compensate".
	CompensateAction string
}

// StepInput is what a step is given.
type StepInput struct {
	RunID     string
	AgentSlug string
	// Step is the 1-based position of the step; Attempt counts from 1.
	Step    int
	Attempt int
	// Input is the run's input, as given to Submit.
	Input json.RawMessage
	// Previous holds the outputs of the steps before this one, by position.
	// In a graph agent only the steps this one depends on, directly or
	// through others, that completed have one; the others are nil.
	Previous []json.RawMessage
	// Outputs holds the same outputs by step name (only the steps that
	// completed and came before this one: in a graph, those it depends
	// on directly or through others).
	Outputs map[string]json.RawMessage
	// Approval is the decision that let the run past its last approval
	// gate before this step: who decided, the reason and its payload
	// (Decision.Payload); nil when no approved gate came before this step.
	// A later gate replaces it for the steps after that one.
	Approval *Decision
	// Event is the external event the run last waited for before this
	// step: its type, id, source and payload (ExternalEvent.Payload); nil
	// when no wait came before this step.
	Event *ExternalEvent
}

// StepOutput is what a step produced.
type StepOutput struct {
	// Summary becomes the step file's output_summary.
	Summary string
	// Data is the step's checkpointed output, kept in the step file: it is
	// handed to later steps and reused when a resumable step is skipped.
	Data json.RawMessage
	// Proposals are ids of proposals the step made elsewhere; they are
	// added to the run's proposals_created as they are (Propose makes
	// proposals the SDK records).
	Proposals []string
	// Files are written under the run's output/ folder, e.g. "proposal.json".
	Files map[string][]byte
	// Propose names files of Files that are proposals: each gets a
	// pending proposal record (docs/spec.md#proposal) whose content is
	// that file, and its id is added to Proposals and so to the run's
	// proposals_created. A name not in Files fails the step.
	Propose []string
	// Await parks the run after this step (approval-run machine only; not
	// in a graph agent).
	Await *Await
	// Next, in a graph agent, chooses which of the steps that depend on
	// this one it lets run (their names); empty lets every one run. A step
	// none of whose dependencies chose it is skipped, recorded so.
	// Ignored by an agent without After.
	Next []string
	// TokensUsed, when set, is kept in the step file (tokens_used): the
	// model tokens the step used.
	TokensUsed *lifecycle.TokensUsed
}

// Await parks a run after a step: at an approval gate, or until an external
// event arrives. Exactly one of Approval and ExternalEvent is set.
type Await struct {
	// Approval names the action that waits for approval.
	Approval string
	// ExternalEvent names the event type the run waits for.
	ExternalEvent string
	// Timeout bounds an external wait; 0 means Config.ExternalTimeout.
	Timeout time.Duration
}

// Agent is a kind of run the Runner executes: its slug, machine and steps.
type Agent struct {
	// Slug identifies the agent (a valid id, e.g. "archivist-violin").
	Slug string
	// Machine is the run machine the agent's runs follow, one of package
	// lifecycle's constants: lifecycle.MachineCanonical (the default, ""
	// too: no cancel, no waits), lifecycle.MachineCancelable (cancel) or
	// lifecycle.MachineApproval (cancel, approval gates and external
	// waits); docs/spec.md#lifecycles.
	Machine string
	Steps   []Step
	// Concurrency is the number of this agent's runs that may execute at
	// once, across every runner sharing the store; 0 means
	// Config.Concurrency (1 by default: one run at a time, the others
	// queued for a slot).
	Concurrency int
	// CompensateOnFailure runs the steps' compensations when a run fails
	// too, not only when it is canceled (docs/spec.md#compensation).
	CompensateOnFailure bool
}

// Config configures a Runner. Only Store is required; every other field has
// the documented default when left zero.
type Config struct {
	Store *storage.Store
	// Owner names this runner in leases. Default: the host name and the
	// executable's base name (e.g. "worker-7/conveyor-worker"), which a
	// restarted process on the same host keeps: at
	// start-up a runner takes over the runs leased to its own Owner at once
	// instead of waiting for their leases to lapse. That is safe even when
	// two live processes share an Owner (set distinct ones all the same):
	// the takeover bumps the epoch, so the other one's writes are fenced
	// out, and a step that is not idempotent runs again only when it
	// provably never started (its start marker is written create-only
	// before it runs), else the run fails RUN_RESUME_FAILED or RUN_ORPHANED.
	Owner string
	// clock.Clock defaults to the wall clock.
	Clock clock.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics receives the run metrics of docs/spec.md#metrics; default none.
	Metrics Metrics
	// Node is written into audit events; default the host name.
	Node string
	// TracerProvider receives the spans of submits, executions and step
	// attempts (docs/spec.md#tracing). Default none: no spans, at no cost;
	// a run still keeps the trace context its submit carried.
	TracerProvider trace.TracerProvider

	// StepTimeout bounds one attempt of a step. Default 120 s (docs/spec.md#retries-and-timeouts).
	StepTimeout time.Duration
	// StepRetries is how many times a failed step is tried again. Default 3;
	// a negative value means no retries.
	StepRetries int
	// RetryBackoff is the first wait before a retry; each next one doubles.
	// Default 1 s (so 1 s, 2 s, 4 s).
	RetryBackoff time.Duration
	// RunTimeout bounds the time a run spends running (waiting for a slot,
	// an approval or an external event does not count). Default 600 s.
	RunTimeout time.Duration
	// QueueTimeout, when set, fails a run that waited longer than this for a
	// slot since it was requested (AGENT_TIMEOUT), on the machines whose table
	// has that move: canonical (queued → failed, an extension) and approval
	// (pending → failed). Default 0: no limit.
	QueueTimeout time.Duration
	// ExternalTimeout bounds an external wait whose Await sets none.
	// Default 24 h.
	ExternalTimeout time.Duration
	// Concurrency is the default number of runs per agent that execute at
	// once, across every runner sharing the store, for an agent that sets
	// none of its own (Agent.Concurrency). Default 1
	// (docs/spec.md#canonical-run): a second run of an agent waits queued
	// until the first ends or parks. The Worker's -run-concurrency sets it.
	Concurrency int
	// LeaseDuration is how long a run's lease lasts unless renewed. Default
	// 5 min (docs/spec.md#recovery: a heartbeat older than 5 min is an orphan).
	LeaseDuration time.Duration
	// HeartbeatInterval is how often the lease is renewed while a step runs.
	// Default 30 s (docs/spec.md#recovery).
	HeartbeatInterval time.Duration
	// PollInterval is how often the runner looks for work it was not handed
	// directly: runs submitted elsewhere, orphans, freed slots, expired
	// waits. Default 1 s.
	PollInterval time.Duration
	// ParkedPollInterval is how often a poll re-reads a run parked for an
	// approval or an external event that this runner was not handed. A
	// control call hands the run it resumes to its own runner, so this
	// bounds only how soon other runners notice a run resumed by a runner
	// that is not running; an external wait's deadline is read on time
	// regardless. Runs another runner executes are re-read when their lease
	// would lapse. Default 30 s.
	ParkedPollInterval time.Duration
	// IndexRepairInterval is how often a poll also repairs the history
	// indexes (a run's entry under its status, missing or left behind
	// by a writer that died between a status write and its index move):
	// a pass reads the active runs and the entries under the states that
	// are not terminal, never the history. Readers check each entry
	// against its run, so until a repair a crash can hide a run from a
	// list, never show a wrong row. Default 10 minutes: each pass lists
	// every agent's states, which an idle process would otherwise pay
	// for every minute.
	IndexRepairInterval time.Duration

	// FinishGrace is how long past a run's deadline (RunTimeout from the
	// start of its execution) the runner keeps trying to record the run's
	// end while the store is unavailable. Every store call of an execution
	// waits out transient store errors (timeouts, 5xx, refused connections)
	// with backoff until start + RunTimeout + FinishGrace; only that deadline
	// turns an outage into UPSTREAM_UNAVAILABLE. Default 60 s.
	FinishGrace time.Duration
	// PollTimeout bounds one poll pass (and one look at a handed run), so a
	// dead store can delay the loop by at most this much at a time. Default
	// 10 s.
	PollTimeout time.Duration
	// AuditTimeout is the budget, in wall-clock time, of the audit write
	// that follows every status write: its own, not the caller's, so a
	// request that runs out of time after its write still gets the write's
	// audit event (transient store errors are retried within it). An
	// audit write that fails even so is written by the run's next writer or
	// by a poll (Status.LastAudit). Default 30 s.
	AuditTimeout time.Duration
	// ShutdownGrace is how long, in wall-clock time, Run waits at shutdown
	// for step goroutines that ignore their context (stragglers, counted
	// by Metrics' StepAbandoned) before it returns anyway. Default 5 s.
	ShutdownGrace time.Duration

	// Idempotency TTLs (docs/spec.md#idempotency): how long a completed
	// and a failed key's record answer duplicates. Defaults 24 h and 1 h.
	IdempotencyCompletedTTL time.Duration
	IdempotencyFailedTTL    time.Duration
	// IdempotencyLease is how long a submit holds its key's record while it
	// creates the run: past it, the next submit of the same request takes
	// the record over and creates the same run (a duplicate within it
	// writes the run itself, too). It only has to outlast one submit's
	// writes. Default 20 s.
	IdempotencyLease time.Duration
	// IdempotencyLockTTL is the lease's earlier name, read when
	// IdempotencyLease is zero.
	//
	// Deprecated: use IdempotencyLease.
	IdempotencyLockTTL time.Duration
	// IdempotencyMaxAttempts bounds retries of a failed request. Default 3.
	IdempotencyMaxAttempts int
}

func (c *Config) setDefaults() error {
	if c.Store == nil {
		return fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	}
	if c.Owner == "" {
		c.Owner = procid.Owner()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.StepTimeout, 120*time.Second)
	def(&c.RetryBackoff, time.Second)
	def(&c.RunTimeout, 600*time.Second)
	def(&c.ExternalTimeout, 24*time.Hour)
	def(&c.LeaseDuration, 5*time.Minute)
	def(&c.HeartbeatInterval, 30*time.Second)
	def(&c.PollInterval, time.Second)
	def(&c.ParkedPollInterval, 30*time.Second)
	def(&c.IndexRepairInterval, 10*time.Minute)
	def(&c.FinishGrace, time.Minute)
	def(&c.PollTimeout, 10*time.Second)
	def(&c.ShutdownGrace, 5*time.Second)
	def(&c.AuditTimeout, 30*time.Second)
	def(&c.IdempotencyCompletedTTL, 24*time.Hour)
	def(&c.IdempotencyFailedTTL, time.Hour)
	if c.IdempotencyLease <= 0 {
		c.IdempotencyLease = c.IdempotencyLockTTL
	}
	def(&c.IdempotencyLease, 20*time.Second)
	if c.StepRetries == 0 {
		c.StepRetries = 3
	} else if c.StepRetries < 0 {
		c.StepRetries = 0
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.IdempotencyMaxAttempts <= 0 {
		c.IdempotencyMaxAttempts = 3
	}
	if c.HeartbeatInterval >= c.LeaseDuration {
		return fmt.Errorf("%w: HeartbeatInterval %v must be shorter than LeaseDuration %v", ErrInvalidConfig, c.HeartbeatInterval, c.LeaseDuration)
	}
	return nil
}

func validateAgent(a Agent) (flow, error) {
	if err := storekey.ValidateID("agent slug", a.Slug); err != nil {
		return flow{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	f, ok := flowFor(a.Machine)
	if !ok {
		return flow{}, fmt.Errorf("%w: agent %s: unknown machine %q (want %s, %s or %s)",
			ErrInvalidConfig, a.Slug, a.Machine, lifecycle.MachineCanonical, lifecycle.MachineCancelable, lifecycle.MachineApproval)
	}
	if len(a.Steps) == 0 {
		return flow{}, fmt.Errorf("%w: agent %s has no steps", ErrInvalidConfig, a.Slug)
	}
	if len(a.Steps) > 99 {
		return flow{}, fmt.Errorf("%w: agent %s has %d steps; step files are numbered 01 to 99", ErrInvalidConfig, a.Slug, len(a.Steps))
	}
	seen := map[string]bool{}
	for i, s := range a.Steps {
		if err := storekey.ValidateID("step name", s.Name); err != nil {
			return flow{}, fmt.Errorf("%w: agent %s step %d: %w", ErrInvalidConfig, a.Slug, i+1, err)
		}
		if seen[s.Name] {
			return flow{}, fmt.Errorf("%w: agent %s: step name %q used twice", ErrInvalidConfig, a.Slug, s.Name)
		}
		seen[s.Name] = true
		if s.Run == nil {
			return flow{}, fmt.Errorf("%w: agent %s step %s has no Run func", ErrInvalidConfig, a.Slug, s.Name)
		}
		if s.Compensate != nil && f.compensate == "" {
			return flow{}, fmt.Errorf("%w: agent %s step %s: Compensate needs the %s or %s machine", ErrInvalidConfig, a.Slug, s.Name,
				lifecycle.MachineCancelable, lifecycle.MachineApproval)
		}
	}
	return f, nil
}
