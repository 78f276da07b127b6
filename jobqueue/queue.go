package jobqueue

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/maintenance"
	quarantinepkg "github.com/runconveyor/conveyor/internal/quarantine"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Queue is the job queue (docs/spec.md#job-lifecycle) over a Store. Many Queues in many
// processes may share one Store: all coordination goes through conditional
// writes. It is safe for concurrent use.
type Queue struct {
	cfg       Config
	clock     clock.Clock
	log       *slog.Logger
	artifacts *artifact.Store
	units     *deadline.Units // the handlers' calls, under StepTimeout
	project   defaultProject
	grace     stopGrace

	quar    *quarantine
	sched   *scheduler
	lanes   *lanes
	locks   *locks
	admit   *admission
	inserts *inserts
	claims  *claimer
	runner  *runner
	reads   *reader
	sweeper *sweeper
	pauses  *pauses
	tally   *tally
	// callbacks posts the callbacks of the jobs that ended (callback.go).
	callbacks *callbackSender
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
	// context allows (the Store made patient); the claim's and the
	// sweep's contexts carry the deadlines.
	store := cfg.Store.Patient(storage.Retry{Clock: cfg.Clock, Log: cfg.Logger})
	ownArtifacts := cfg.Artifacts == nil // over the queue's store: its writes can join the queue's commits
	if cfg.Artifacts == nil {
		a, err := artifact.New(artifact.Config{Store: store, Clock: cfg.Clock, Node: cfg.Node, Logger: cfg.Logger, Types: contentTypes, Project: cfg.Project})
		if err != nil {
			return nil, err
		}
		cfg.Artifacts = a
	}
	q := assemble(cfg, store)
	q.runner.jointArtifact = ownArtifacts && store.CanCommit() && store.SettleTime() == 0
	return q, nil
}

// assemble builds the Queue's components over store, each given what it
// uses, in the order they depend on one another.
func assemble(cfg Config, store *storage.Store) *Queue {
	q := &Queue{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, artifacts: cfg.Artifacts,
		units: &deadline.Units{Clock: cfg.Clock, Log: cfg.Logger}, project: defaultProject(cfg.Project),
		grace: stopGrace(cfg.StopGrace), sched: newScheduler()}
	obs := &observer{metrics: cfg.Metrics, waits: &waitSet{}}
	q.quar = &quarantine{store: store, mover: &quarantinepkg.Mover{Store: store, Clock: cfg.Clock, Log: cfg.Logger}, obs: obs}
	absent := &evidence.Absence{Settle: store.SettleTime()}
	audit := &auditor{store: store, log: cfg.Logger, node: cfg.Node, artifactActor: cfg.ArtifactActor}
	ob := &outbox{store: store}
	jobs := &jobStore{store: store, clock: cfg.Clock, quar: q.quar, absent: absent, audit: audit, obs: obs, grace: q.grace, outbox: ob}
	q.callbacks = &callbackSender{store: store, clock: cfg.Clock, log: cfg.Logger, jobs: jobs, outbox: ob, units: q.units,
		client: cfg.CallbackClient, hosts: callbackHosts(cfg.CallbackHosts), node: cfg.Node, attempts: cfg.CallbackAttempts,
		backoff: cfg.CallbackBackoff, timeout: cfg.CallbackTimeout, pending: cfg.LeaseTTL}
	q.lanes = &lanes{store: store, clock: cfg.Clock, log: cfg.Logger, sched: q.sched, leaseTTL: cfg.LeaseTTL, grace: q.grace}
	q.locks = &locks{store: store, clock: cfg.Clock, log: cfg.Logger, sched: q.sched, quar: q.quar, settle: absent.Settle, absent: absent, lost: &reconcileAsked{}}
	retries := &retries{jobs: jobs, lanes: q.lanes, backoff: cfg.Backoff, types: cfg.Types}
	repair := &repairer{store: store, clock: cfg.Clock, leaseTTL: cfg.LeaseTTL, jobs: jobs, lanes: q.lanes,
		sched: q.sched, audit: audit, retries: retries}
	q.runner = &runner{store: store, clock: cfg.Clock, log: cfg.Logger, tracer: tracing.New(cfg.TracerProvider),
		units: q.units, jobs: jobs, lanes: q.lanes, sched: q.sched, audit: audit, retries: retries, obs: obs,
		artifacts: cfg.Artifacts, types: cfg.Types, project: q.project, artifactActor: cfg.ArtifactActor,
		leaseTTL: cfg.LeaseTTL, stepTimeout: cfg.StepTimeout, grace: q.grace, workMW: cfg.WorkMiddleware}
	twice := &twiceCheck{store: store, absent: absent, artifacts: cfg.Artifacts, project: q.project, quar: q.quar, log: cfg.Logger}
	q.pauses = &pauses{store: store, clock: cfg.Clock, log: cfg.Logger, sched: q.sched, absent: &evidence.Absence{Settle: store.SettleTime()}, rolling: cfg.RollingUpgrade}
	q.runner.caps = &caps{types: cfg.Types, queues: cfg.Queues, rolling: cfg.RollingUpgrade, sched: q.sched,
		running: map[string]int{}, waiting: map[string]map[*agentState]bool{}}
	q.claims = &claimer{store: store, clock: cfg.Clock, leaseTTL: cfg.LeaseTTL, grace: q.grace, sched: q.sched,
		lanes: q.lanes, locks: q.locks, jobs: jobs, repair: repair, retries: retries, audit: audit, twice: twice, runner: q.runner,
		caps: q.runner.caps, pauses: q.pauses}
	userTypes := map[lifecycle.JobType]string{}
	typeMax := map[lifecycle.JobType]int{}
	for t, tc := range cfg.Types {
		userTypes[t] = tc.Queue
		if tc.MaxAttempts > 0 {
			typeMax[t] = tc.MaxAttempts
		}
	}
	q.admit = &admission{store: store, clock: cfg.Clock, tracer: q.runner.tracer, jobs: jobs, lanes: q.lanes,
		locks: q.locks, quar: q.quar, obs: obs, maxAttempts: cfg.MaxAttempts, typeMax: typeMax, userTypes: userTypes, rolling: cfg.RollingUpgrade,
		hosts: callbackHosts(cfg.CallbackHosts)}
	q.inserts = &inserts{admit: q.admit, mw: cfg.InsertMiddleware}
	q.reads = &reader{store: store, watch: cfg.Store, clock: cfg.Clock, jobs: jobs, quar: q.quar, waits: obs.waits}
	q.sweeper = &sweeper{Base: maintenance.Base{Name: "sweep", Clock: cfg.Clock, Logger: cfg.Logger}, store: store, jobs: jobs, locks: q.locks, audit: audit,
		repair: repair, sched: q.sched, quar: q.quar, batch: cfg.SweepBatch, asked: q.locks.lost}
	q.tally = &tally{store: store, clock: cfg.Clock, jobs: jobs, log: cfg.Logger, quar: q.quar}
	return q
}

// Enqueue creates a job in PENDING, validates it and moves it to QUEUED
// (docs/spec.md#job-lifecycle), and puts it in its
// agent's ready lane. Validation comes before any write, so the job is
// written once, already QUEUED, with both moves in its audit. The actor
// needs Create (the gateway or the orchestration layer, docs/spec.md#authority-matrix); the
// move to QUEUED is the orchestration layer's, which the queue is. Invalid input (lifecycle.ErrInvalidJob) or a refusal
// (lifecycle.ErrForbiddenActor) writes nothing; an existing id gives lifecycle.ErrJobExists.
// The job keeps the trace context of ctx (with Config.TracerProvider set,
// that of a conveyor.enqueue span): every attempt's spans continue it.
// A job with a RunAt or Delay is QUEUED from now, with ScheduledAt, and no
// claim picks it up before that time; a higher Priority is picked up first
// among the jobs ready in its lane (docs/spec.md#delayed-jobs-and-priorities).
// A job with Unique set gets an id derived from its uniqueness; when a job
// holds that uniqueness already, Enqueue returns it with Duplicate set and
// writes nothing, no error (docs/spec.md#unique-jobs). On a store that
// settles, an insert of a uniqueness not yet held waits the settle time,
// within ctx, before it believes no job holds it.
// Config.InsertMiddleware sees n first, as a batch of one, once the actor
// may create jobs.
func (q *Queue) Enqueue(ctx context.Context, actor lifecycle.Actor, n NewJob) (lifecycle.Job, error) {
	return q.inserts.one(ctx, actor, n)
}

// EnqueueMany enqueues jobs, each as Enqueue would, as one batch (River's
// InsertMany): at most 10,000 jobs (more is lifecycle.ErrInvalidJob),
// none is written before every one is checked, and one invalid job, or
// two of one job_id, fail the batch with a *lifecycle.BatchError naming
// the job's index and nothing written. The jobs of one agent, priority
// and run time are claimed in the batch's order. No jobs is no error.
//
// Which jobs landed when it fails (docs/spec.md#batch-insert): always the
// batch's first ones, returned, the rest not written; a
// *lifecycle.BatchError's Landed says how many.
//
//   - On a store that commits several writes at once (storage's
//     CanCommit: memstore, SQLite) the batch is written 500 jobs a
//     commit, in order, each commit all or nothing, and the first that
//     fails stops the batch. A failure of the first commit writes
//     nothing (a job whose id exists is a *lifecycle.BatchError naming
//     it, matching lifecycle.ErrJobExists; the store's error is returned
//     as it is); a failure of a later one is a *lifecycle.BatchError
//     whose Landed is where that commit starts and whose Index is the job
//     at fault in it, or its first job. An error matching
//     storage.ErrOutcomeUnknown means that commit landed whole or not at
//     all (the queue has read a record to find out, and could not).
//   - On another store (filestore, S3) the jobs are written one at a
//     time, in order, and the first failure stops the batch: the error
//     is a *lifecycle.BatchError whose Index, and Landed, is the job that
//     failed (it too may have landed when the error matches
//     storage.ErrOutcomeUnknown); the later jobs were not tried.
//
// Jobs that name their ids can be sent again after a failure without
// being created twice: a job that landed is refused with
// lifecycle.ErrJobExists (or send jobs[Landed:]). A unique job (Unique
// set) whose uniqueness a job holds, in the store or earlier in the
// batch, is answered by that job with Duplicate set, and not written.
//
// Config.InsertMiddleware sees the batch first, whole, once the actor may
// create jobs; no jobs pass by it.
func (q *Queue) EnqueueMany(ctx context.Context, actor lifecycle.Actor, jobs []NewJob) ([]lifecycle.Job, error) {
	return q.inserts.many(ctx, actor, jobs)
}

// Requeue is the operator's manual requeue (FAILED → QUEUED, and the
// extension DEAD → QUEUED, invariant F2: docs/spec.md#job-lifecycle). Only the admin may make it:
// the matrix lets the orchestration layer update status too, but the job
// machine gives this move to the admin alone, so anyone else gets a
// FORBIDDEN error and nothing is written. The job starts over with a fresh
// set of attempts (attempt 0) and its error cleared.
func (q *Queue) Requeue(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.Job, error) {
	return q.admit.requeue(ctx, actor, jobID)
}

// Cancel cancels a job of a type of the user's (Config.Types: the general
// job machine, docs/spec.md#extensions). A QUEUED job, or one waiting in
// RETRY_BACKOFF, ends CANCELLED at once and leaves its lane. For a
// RUNNING job the cancel is asked for: the job is returned still RUNNING,
// with its cancel_requested_at set, and its worker ends it CANCELLED at
// its next write (its heartbeat, every LeaseTTL/3, or the end of its
// attempt): the handler's context ends then, and a handler that ignores
// it is left behind as at its StepTimeout, its result dropped. A second
// cancel of it changes nothing.
//
// Who may cancel is who may requeue: the admin (the authority matrix's
// update_status and the machine's cancel move); anyone else gets a
// FORBIDDEN error and nothing is written. A job that has finished
// (COMPLETE, FAILED, DEAD, CANCELLED) gives a *lifecycle.JobCancelError
// matching lifecycle.ErrJobFinished; a job of the three NLM types, whose
// machine (the spec's) has no cancel, one matching
// lifecycle.ErrJobNotCancellable.
func (q *Queue) Cancel(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.Job, error) {
	return q.admit.cancel(ctx, actor, jobID)
}

// Claim finds a ready job of an agent whose lock is free and picks it up
// for worker, or returns nil when there is none. On the way it rescues the
// orphan of an expired lock and moves on the jobs whose backoff ran out.
// worker must be unique among the workers sharing the store.
//
// The Queue keeps its agents in order of when each is next worth a look
// (its lane's head is ready, its lock is due an orphan check, a lock seen
// held may be free), so a Claim looks only at agents that are due.
func (q *Queue) Claim(ctx context.Context, worker string) (*Claim, error) {
	return q.claims.claimFor(ctx, worker, nil)
}

// Get reads a job. The actor needs Read (docs/spec.md#authority-matrix); the NLM backend may
// read only its own job, one in NOTEBOOKLM_CALL.
func (q *Queue) Get(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.Job, error) {
	return q.reads.get(ctx, actor, jobID)
}

// List yields every job of the context's tenant (every tenant's under
// lifecycle.AllTenants) in key order. The actor needs Read without
// qualification (the NLM backend may not list jobs).
func (q *Queue) List(ctx context.Context, actor lifecycle.Actor) iter.Seq2[lifecycle.Job, error] {
	return q.reads.list(ctx, actor)
}

// ListPage reads a page of jobs in job id order (GET /jobs), from the
// jobs/ listing and its cursor: no index of its own, so the queue keeps
// its 8 writes per job (docs/design.md#listing-and-indexes). Filters are
// checked on each record read, at most four times the limit (and at least
// 200) of them a page. The actor needs Read without
// qualification, as for List.
func (q *Queue) ListPage(ctx context.Context, actor lifecycle.Actor, jq JobQuery) (JobPage, error) {
	return q.reads.listPage(ctx, actor, jq)
}

// Wait waits until job jobID is COMPLETE, DEAD or CANCELLED and returns it as then
// written, acting as the system. It wakes at once when this Queue writes
// the job (a Worker of this process ran it), at the store's signal where
// the store watches (a write by another process), and
// else on a poll that backs off from 25 ms to 1 s. On a fake clock it
// counts as work while it reads and waits on the clock's timers, so a
// test that drives the clock sees the same run every time.
//
// When ctx ends first it returns the job as last read and an error that
// names the job and its last status and wraps the cause
// (context.Canceled, context.DeadlineExceeded). A job
// that does not exist gives an error matching storage.ErrNotFound; a
// quarantined one a *lifecycle.QuarantinedError.
func (q *Queue) Wait(ctx context.Context, jobID string) (lifecycle.Job, error) {
	return q.reads.wait(ctx, jobID)
}

// Sweep is the slow repair pass behind the fast paths, for what a worker
// that died between two writes can leave. It reads only work in flight
// (repair.go): the agents' locks and the ready lanes under queue/, and the
// jobs they name, never a finished job. It rescues orphans whose lease
// expired (when no claim on their agent's lock did), recreates the
// ready-lane entry of a job its claim left unlaned, buries FAILED jobs,
// deletes lane entries long abandoned by their writer, and re-emits
// missing audit events of each job's last write. Its cost grows with the
// agents and the jobs in flight, not with the jobs that ever finished;
// workers run it in batches through SweepIfDue.
func (q *Queue) Sweep(ctx context.Context) (SweepReport, error) {
	return q.sweeper.all(ctx)
}

// Operator is the queue's operations for an operator and a dashboard, on
// a type of its own beside the Queue's job life: each lane's depth and
// running jobs, a job's history, the counts and the last hour, bulk
// requeue and cancel, a queue's pause, and the reconcile after a store
// incident. The HTTP API's operator routes call these, as the Go client's
// Operator calls those routes. Build it over a Queue:
// jobqueue.Operator{Queue: q}.
type Operator struct {
	Queue *Queue
}

// Reconcile reads every job record, finished history included, and
// repairs each job in flight that no lane entry or agent lock points at,
// as Sweep repairs those they do: the work a store left unreachable when
// it lost one of the queue's own objects. Sweep never reads history, so
// it cannot find such a job; a Worker starts a pass like this one by
// itself once it sees such a loss, carried out a batch per sweep. Its cost
// is one read per job kept, so call it after a store incident, not on a
// schedule. It is safe beside running Workers.
func (o Operator) Reconcile(ctx context.Context) (SweepReport, error) {
	q := o.Queue
	r, _, err := q.sweeper.reconcile(ctx, layout.JobsPrefix, 0)
	return r, err
}

// SweepIfDue sweeps the next Config.SweepBatch entries of work in flight
// (Sweep) unless a worker sharing the store has swept within every: it
// takes the sweep lease (create-only, or compare-and-swap of an expired
// one) for every, and only the worker that takes it sweeps. So N workers
// calling it every minute read one batch a minute between them, not N
// sweeps; the lease keeps the cursor, so the batches go round all the
// work in flight. The
// lease is not given back: its expiry spaces the sweeps, and a worker that
// dies while sweeping is followed by the next one after every. swept tells
// whether this call swept.
func (q *Queue) SweepIfDue(ctx context.Context, worker string, every time.Duration) (r SweepReport, swept bool, err error) {
	if err := storekey.ValidateID("worker id", worker); err != nil {
		return r, false, err
	}
	if every <= 0 {
		return r, false, fmt.Errorf("jobqueue: sweep interval %s is not positive", every)
	}
	return q.sweeper.every(worker, every).ifDue(ctx)
}

// Artifacts returns the artifact store the queue writes to.
func (q *Queue) Artifacts() *artifact.Store { return q.artifacts }

// Depths reads every agent's ready lane (queue/lanes/) and returns, by
// agent in name order, how much work waits there now. Lanes hold only
// work not yet picked up, so a call costs the work waiting, never the
// jobs that finished. An entry a worker has picked up but not yet deleted
// (it died in between) counts until the next claim of its agent clears it.
func (q *Queue) Depths(ctx context.Context) ([]AgentDepth, error) {
	return q.lanes.depths(ctx)
}

// History reads a job with its moves and attempts (GET
// /jobs/{jobId}/history): the moves from the audit log, whose objects of
// the job are found by listing the log from the job's creation to its
// last write (keys only; at most 20,000 keys and 31 days, past which the
// history is Partial) and reading the job's own, and from the record the
// moves not yet flushed there. Each failed attempt carries its own error
// where its move recorded it (jobs run before it was recorded show only
// the record's last error). Result is the content of the job's artifact.
// The actor needs Read, as for Get.
func (o Operator) History(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.JobHistory, error) {
	q := o.Queue
	h, err := q.reads.history(ctx, actor, jobID)
	if err == nil && h.Job.ArtifactID != "" {
		// The result is shown where it can be read: an actor without Read
		// on artifacts, or an artifact gone (retention), still gets the rest.
		if a, aerr := q.artifacts.Get(ctx, actor, h.Job.ProjectID, h.Job.ArtifactID); aerr == nil {
			h.Result = a.Content
		}
	}
	return h, err
}

// RequeueMatching requeues the jobs of one page of jq (the filters of
// ListPage, and its cursor) that the job machine may requeue (FAILED,
// DEAD), as Requeue does each: jobs in other states are passed over. A
// call acts on at most jq.Limit jobs, MaxBulk (100) when 0; more is
// refused. The result names the jobs requeued, those refused or not
// written with their codes, and the cursor of the rest: call again with
// it as jq.Cursor until it is "". The actor is checked before any read:
// only the admin may requeue.
func (o Operator) RequeueMatching(ctx context.Context, actor lifecycle.Actor, jq JobQuery) (lifecycle.BulkResult, error) {
	q := o.Queue
	return bulk(ctx, actor, q.reads, jq, machine.EventRequeue, q.admit.requeue)
}

// CancelMatching cancels the jobs of one page of jq (the filters of
// ListPage, and its cursor) that may be cancelled, as Cancel does each:
// QUEUED and RETRY_BACKOFF jobs end CANCELLED at once, a RUNNING one has
// its cancel asked for (its worker ends it CANCELLED); jobs in other
// states are passed over, and a job of an NLM type is refused
// (JOB_NOT_CANCELLABLE, in the result's Failed). A call acts on at most
// jq.Limit jobs, MaxBulk (100) when 0; more is refused. The result names
// the jobs cancelled (or asked to be), those refused or not written with
// their codes, and the cursor of the rest: call again with it as
// jq.Cursor until it is "". The actor is checked before any read: only
// the admin may cancel.
func (o Operator) CancelMatching(ctx context.Context, actor lifecycle.Actor, jq JobQuery) (lifecycle.BulkResult, error) {
	q := o.Queue
	return bulkCancel(ctx, actor, q.reads, jq, q.admit.cancel)
}

// Counts counts the jobs in each state, per job type and agent (GET
// /stats/jobs/counts), without reading the jobs that finished: where each job
// last came to rest is the audit log's (one object per job life segment,
// rolled up once per closed hour and day into records under stats/jobs/,
// and the objects since read as they come), and the jobs in flight,
// which the lanes and the agents' locks name, are read to count where
// they are now. So a call costs the jobs in flight and the last hour's
// objects, never the history, and the counts follow every move the list
// shows (a requeue, a cancel, a completion). A call reads at most 20,000
// records; past that the answer is Partial, what was rolled up is kept,
// and the next call goes on. The actor needs Read without qualification,
// as for List. A row is one tenant's: a call acting for a tenant
// (lifecycle.WithTenant; none: the default) counts its tenant's jobs, one
// for every tenant (lifecycle.AllTenants) every tenant's, at the same cost.
func (o Operator) Counts(ctx context.Context, actor lifecycle.Actor) (lifecycle.JobCounts, error) {
	q := o.Queue
	return q.tally.counts(ctx, actor)
}

// Activity reads the last hour minute by minute (GET /stats/jobs/activity): the
// jobs completed, the attempts failed, the jobs cancelled, and the run
// time and wait of the attempts that ended, from the same rollups and
// objects as Counts, bounded alike. The actor needs Read, as for List;
// the minutes are of the tenants the call sees, as for Counts.
func (o Operator) Activity(ctx context.Context, actor lifecycle.Actor) (lifecycle.JobActivity, error) {
	q := o.Queue
	return q.tally.activity(ctx, actor)
}

// Lanes lists the queue's lanes (an agent's, or a job type's for jobs
// without an agent) in name order: the work waiting in each (Depths) and
// whether a job of it runs now. It reads the lanes and at most
// MaxLaneLocks of their locks, and, for a held lock, the one job it
// names: its cost grows with the lanes, never with the jobs.
func (o Operator) Lanes(ctx context.Context) ([]lifecycle.QueueLane, error) {
	q := o.Queue
	return laneStates(ctx, q)
}

// SetPaused pauses a named queue ("default" included), or
// resumes it, for every Worker sharing the store: while paused no job of
// it starts; jobs running when it was paused finish. Workers of this
// process obey at once, others within a second of their next look for
// work. Lanes says which lanes' queues are paused. The actor needs
// UpdateStatus, as for Requeue. A name that is no queue's (1 to 64 bytes
// of [A-Za-z0-9_-]) is lifecycle.ErrInvalidInput. During a rolling
// upgrade (Config.RollingUpgrade) a pause is refused, matching
// ErrInvalidConfig: a Worker of the previous release would not obey it.
// Pausing a paused queue, or resuming one not paused, is no error.
func (o Operator) SetPaused(ctx context.Context, actor lifecycle.Actor, queue string, paused bool) error {
	q := o.Queue
	if paused {
		return q.pauses.pause(ctx, actor, queue)
	}
	return q.pauses.resume(ctx, actor, queue)
}
