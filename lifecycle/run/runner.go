package run

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Runner is the Orchestration Layer wrapper (docs/spec.md#platform-names): the one writer of
// every run's status.json (invariant F4, docs/spec.md#job-lifecycle). Submit creates a run
// (requested); Run executes runs: it admits them, starts them when a slot of
// their agent is free, runs their steps with timeouts and retries, keeps a
// lease on each by heartbeat, and recovers runs whose runner was lost.
// Several Runners may share one Store: slots, leases and compare-and-swap
// writes keep each run executed by one of them at a time.
type Runner struct {
	cfg   Config
	store *storage.Store // patient
	// units runs step attempts under their deadlines and counts the
	// goroutines of attempts abandoned there (stragglers).
	units  *deadline.Units
	cat    *catalog
	poison *poison
	life   *lifetime
	inbox  *inbox
	sched  *admission

	submission *submission
	idem       *idempotency
	control    *controller
	reads      *reads

	started atomic.Bool
}

// NewRunner checks cfg and the agents and returns a Runner. Nothing runs
// until Run is called.
func NewRunner(cfg Config, agents ...Agent) (*Runner, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	cat, err := newCatalog(cfg.Concurrency, agents)
	if err != nil {
		return nil, err
	}
	return wire(&cfg, cat), nil
}

// Owner is the name this runner holds leases under.
func (r *Runner) Owner() string { return r.cfg.Owner }

// Agents lists the agents this runner executes, by slug, as they are in
// effect: Machine names the run machine (lifecycle.MachineCanonical when the
// agent left it empty) and Concurrency is the agent's or Config.Concurrency.
// The slices are copies; an API lists them (GET /agents) without reaching
// into the runner.
func (r *Runner) Agents() []Agent { return r.cat.list() }

// Submit creates a run in its machine's initial state (requested on the
// canonical machine), as the gateway, and hands it to this runner's loop.
// It writes nothing when the request is invalid: an *InputError for text
// over its limit (MaxNameBytes, MaxDocumentBytes for Input,
// 512 bytes for IdempotencyKey) or not clean UTF-8, a *RequestError otherwise.
//
// The run keeps the trace context of ctx (its span's W3C traceparent, in
// status.json): with Config.TracerProvider set, that of a conveyor.submit
// span started under the caller's; every execution continues it.
func (r *Runner) Submit(ctx context.Context, req lifecycle.SubmitRequest) (res lifecycle.SubmitResult, err error) {
	return r.submission.submit(ctx, req)
}

// Cancel asks a run to stop (docs/spec.md#cancel-aware-run). On the cancel-aware machine a queued
// run is canceled at once and a running one moves to cancel_requested: its
// step's context is canceled and the runner ends it canceled, unless the
// step finishes first (then it may still succeed or fail, as the
// machine allows). On the approval machine a run that is not executing is cancelled
// at once, and an executing one when its runner notices. The canonical
// machine has no cancel: lifecycle.ErrRunUnsupported.
func (r *Runner) Cancel(ctx context.Context, runID string, actor lifecycle.Actor, req CancelRequest) (lifecycle.RunStatus, error) {
	return r.control.cancel(ctx, runID, actor, req)
}

// Approve resumes a run waiting at an approval gate (awaiting_approval →
// running). A runner then executes the steps left, each given the
// decision and its payload (StepInput.Approval); when the gate followed
// the last step it completes the run, writing its manifest.
func (r *Runner) Approve(ctx context.Context, runID string, actor lifecycle.Actor, dec Decision) (lifecycle.RunStatus, error) {
	return r.control.approve(ctx, runID, actor, dec)
}

// Reject fails a run waiting at an approval gate with APPROVAL_REJECTED.
func (r *Runner) Reject(ctx context.Context, runID string, actor lifecycle.Actor, dec Decision) (lifecycle.RunStatus, error) {
	return r.control.reject(ctx, runID, actor, dec)
}

// Deliver hands a run the external event it waits for (waiting_external →
// running); a runner then goes on as after an approval, the steps left
// given the event and its payload (StepInput.Event).
func (r *Runner) Deliver(ctx context.Context, runID string, actor lifecycle.Actor, ev ExternalEvent) (lifecycle.RunStatus, error) {
	return r.control.deliver(ctx, runID, actor, ev)
}

// Status reads a run's status.json (GET /runs/{runId}/status).
//
// A status.json that cannot be decoded or fails validation (a status its
// machine does not know, a run_id or agent_slug that is not its key's) is
// quarantined, and Status, like Wait, returns a *lifecycle.QuarantinedError.
func (r *Runner) Status(ctx context.Context, runID string) (lifecycle.RunStatus, error) {
	doc, err := r.reads.status(ctx, runID)
	if err == nil {
		// Here only: its cost is the agent's queue, which Wait's poll,
		// the listings and AllSteps must not pay on every read.
		r.reads.markQueued(ctx, &doc)
	}
	return doc, err
}

// Steps reads a run's step files in step order (GET /runs/{runId}/steps).
func (r *Runner) Steps(ctx context.Context, runID string) ([]lifecycle.StepRecord, error) {
	return r.reads.steps(ctx, runID)
}

// Input reads the input a run was submitted with (every step is given it),
// nil for a run submitted without one. A run of another tenant than the
// context's is not found, as for Status.
func (r *Runner) Input(ctx context.Context, runID string) (json.RawMessage, error) {
	return r.reads.input(ctx, runID)
}

// Runs reads the status of every run of an agent, oldest first, by
// listing its run folders: its cost is the agent's history. ListRuns reads
// a page from the indexes (GET /runs). Only the context's tenant's runs
// are returned, as for Status.
func (r *Runner) Runs(ctx context.Context, slug string) ([]lifecycle.RunStatus, error) {
	return r.reads.runs(ctx, slug)
}

// ActiveRuns counts the runs not yet terminal by status, as the store holds
// them: it lists the active index and reads each run's status.json (a read
// per active run, so call it at a scrape, not per request). Every state
// that is not terminal of the machines of this runner's agents is in the
// map, 0 when no run is in it. It is what gwi_run_active_gauge exports
// (at every scrape, with the Client's Config.Metrics): read from the store, the count is right
// after a restart and with several runners sharing the store, where counts
// moved by one process's writes are not.
//
// It counts the runs of ctx's tenant (lifecycle.WithTenant; none: the
// default tenant), every tenant's for lifecycle.AllTenants.
func (r *Runner) ActiveRuns(ctx context.Context) (map[string]int, error) {
	return r.reads.activeRuns(ctx)
}

// ActiveRunsByTenant is ActiveRuns by tenant ("" for the default
// tenant): the default tenant and every tenant with a run not yet
// terminal for a caller of lifecycle.AllTenants, else the caller's tenant
// alone. It is what
// gwi_run_active_gauge exports by tenant_id.
func (r *Runner) ActiveRunsByTenant(ctx context.Context) (map[string]map[string]int, error) {
	return r.reads.activeRunsByTenant(ctx)
}

// Wait returns the run's status once it is terminal or parked (waiting for
// an approval or an external event), or ctx's error. It re-reads when this
// runner writes any status and at every PollInterval.
func (r *Runner) Wait(ctx context.Context, runID string) (lifecycle.RunStatus, error) {
	return r.reads.wait(ctx, runID)
}

// ListRuns reads a page of runs newest first (GET /runs), through the
// history indexes: its cost is the page (a List and a read per run), not
// the history. A bad limit, cursor, status or agent is a *RequestError or
// an error whose code (lifecycle.ErrorCode) is INVALID_REQUEST, or
// INVALID_CURSOR for the cursor.
func (r *Runner) ListRuns(ctx context.Context, q RunQuery) (RunPage, error) {
	return r.reads.listRuns(ctx, q)
}
