package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// NewJob is what Enqueue needs; the queue fills in the rest of the record.
// Its fields are lifecycle.NewJob's (the Go client sends that one without
// the engine); a conversion turns one into the other. Only JobType is
// required: RunID may be empty (a job of no run), and so may AgentSlug (the
// job then runs in its type's lane, "_type." and the type, which becomes its
// agent_slug). Ids are storage ids
// (storage.ErrInvalidID); Payload is JSON of at most 1 MiB,
// the URLs at most 4,096 bytes, and Context.EntityRefs at most
// 256 refs of 1,024 bytes, all valid UTF-8 without NUL
// or control characters.
type NewJob lifecycle.NewJob

// newUUID is a job's id when its enqueue names none: a UUID of version 7
// (RFC 9562), its first 48 bits the milliseconds of now, then a
// sub-millisecond sequence that keeps this process's ids increasing, then
// random bits (google/uuid). Ids that sort by creation keep a store's key
// index appending rather than writing a random page of it per insert
// (docs/performance.md), and list the job keys in creation order. Ids
// made by earlier releases (version 4) stay valid.
func newUUID() string {
	return uuid.Must(uuid.NewV7()).String() // crypto/rand never fails (Go 1.24+)
}

func badJob(format string, args ...any) error {
	return fmt.Errorf("%w: %s", lifecycle.ErrInvalidJob, fmt.Sprintf(format, args...))
}

func (n *NewJob) validate(defaultMax int, user map[lifecycle.JobType]string) error {
	// Text first: a job type of invalid UTF-8 is INVALID_INPUT, as every
	// other field's, not an unknown type.
	if err := n.checkText(); err != nil {
		return fmt.Errorf("%w: %w", lifecycle.ErrInvalidJob, err)
	}
	if n.Unique != nil {
		// Its id is derived from its uniqueness when it is written.
		if err := n.checkUnique(); err != nil {
			return err
		}
	} else if n.JobID == "" {
		n.JobID = newUUID()
	}
	if err := n.checkID(); err != nil {
		return err
	}
	if n.RunID != "" {
		if err := storekey.ValidateID("run id", n.RunID); err != nil {
			return fmt.Errorf("%w: %w", lifecycle.ErrInvalidJob, err)
		}
	}
	if n.ProjectID != "" {
		if err := storekey.ValidateID("project id", n.ProjectID); err != nil {
			return fmt.Errorf("%w: %w", lifecycle.ErrInvalidJob, err)
		}
	}
	typeQueue, isUser := user[n.JobType]
	if _, ok := artifact.TypeForJob(n.JobType); !ok && !isUser {
		return badJob("job_type %q is not RESEARCH, BRIEF, PROPOSAL_PREPROCESS or a type of Config.Types", n.JobType)
	}
	if err := n.checkQueue(typeQueue); err != nil {
		return err
	}
	if n.AgentSlug == "" {
		// No agent: the job runs in its type's lane of its queue
		// (typeLane), and the lane is its agent_slug, so every pass that
		// works by agent (claim, sweep, metrics) works on it.
		n.AgentSlug = typeLane(n.JobType, n.Queue)
		if err := storekey.ValidateID("agent slug", n.AgentSlug); err != nil {
			return badJob("job_type %q is too long to name a lane: the job needs an agent_slug (%v)", n.JobType, err)
		}
	}
	if err := storekey.ValidateID("agent slug", n.AgentSlug); err != nil {
		return fmt.Errorf("%w: %w", lifecycle.ErrInvalidJob, err)
	}
	if n.MaxAttempts == 0 {
		n.MaxAttempts = defaultMax
	}
	if n.MaxAttempts < 1 || n.MaxAttempts > 100 {
		return badJob("max_attempts %d outside 1..100", n.MaxAttempts)
	}
	if err := n.checkSchedule(); err != nil {
		return err
	}
	if len(n.Payload) > 0 && !json.Valid(n.Payload) {
		return badJob("payload is not valid JSON")
	}
	if n.Callback != "" {
		u, err := url.Parse(n.Callback)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return badJob("callback %q is not an http(s) URL", n.Callback)
		}
	}
	for i, ref := range n.Context.EntityRefs {
		if ref == "" {
			return badJob("context.entity_refs[%d] is empty", i)
		}
	}
	return nil
}

// checkID checks the job's id: none yet for a unique job (derived when
// it is written).
func (n *NewJob) checkID() error {
	if n.Unique == nil {
		if err := storekey.ValidateID("job id", n.JobID); err != nil {
			return fmt.Errorf("%w: %w", lifecycle.ErrInvalidJob, err)
		}
		if strings.HasPrefix(n.JobID, uniquePrefix) {
			// Reserved: a plain job at a uniqueness's id would take it.
			return fmt.Errorf("%w: job id %q: the prefix %q is a unique job's", lifecycle.ErrInvalidJob, n.JobID, uniquePrefix)
		}
	}
	return nil
}

// maxDelay bounds NewJob.Delay: far past any use, and short of the lane
// key's last time (2262), so that the enqueue's time plus it cannot overflow.
const maxDelay = 100 * 365 * 24 * time.Hour

// lastRunAt bounds NewJob.RunAt, short of the lane key's last time (2262)
// by more than maxDelay. A run time already past means at once.
var lastRunAt = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// checkSchedule checks the priority and the run time of n.
func (n *NewJob) checkSchedule() error {
	if n.Priority != 0 && (n.Priority < lifecycle.MinPriority || n.Priority > lifecycle.MaxPriority) {
		return badJob("priority %d outside %d..%d", n.Priority, lifecycle.MinPriority, lifecycle.MaxPriority)
	}
	if n.Delay < 0 || n.Delay > maxDelay {
		return badJob("delay %s outside 0 to 100 years", n.Delay)
	}
	if n.RunAt.After(lastRunAt) {
		return badJob("run_at %s is after 2200", n.RunAt.Format(time.RFC3339))
	}
	return nil
}

// readyAt is when n, enqueued at now, may start: now, or later as its
// RunAt and Delay say.
func (n *NewJob) readyAt(now time.Time) time.Time {
	at := now
	if n.RunAt.After(at) {
		at = n.RunAt.UTC()
	}
	if d := now.Add(n.Delay); d.After(at) {
		at = d
	}
	return at
}

// checkText bounds the free text of a job (issue 10 F) before anything
// else looks at it: the job type (MaxNameBytes), the payload
// (MaxDocumentBytes, codes.CheckJSON), the URLs (MaxURLBytes) and the
// entity refs (MaxListLen of MaxRefBytes each), all clean UTF-8.
// It returns nil or a *lifecycle.InputError.
func (n *NewJob) checkText() error {
	if err := codes.CheckText("job_type", string(n.JobType), codes.MaxNameBytes, codes.OneLine); err != nil {
		return err
	}
	if err := codes.CheckJSON("payload", n.Payload, codes.MaxDocumentBytes); err != nil {
		return err
	}
	if err := codes.CheckText("callback", n.Callback, codes.MaxURLBytes, codes.OneLine); err != nil {
		return err
	}
	if err := codes.CheckText("context.memory_snapshot_url", n.Context.MemorySnapshotURL, codes.MaxURLBytes, codes.OneLine); err != nil {
		return err
	}
	if err := codes.CheckList("context.entity_refs", len(n.Context.EntityRefs)); err != nil {
		return err
	}
	for i, ref := range n.Context.EntityRefs {
		if err := codes.CheckText(fmt.Sprintf("context.entity_refs[%d]", i), ref, codes.MaxRefBytes, codes.OneLine); err != nil {
			return err
		}
	}
	return nil
}

// admission puts jobs in their agents' lanes from outside a claim:
// Enqueue's new jobs and Requeue's dead ones.
type admission struct {
	store       *storage.Store
	clock       clock.Clock
	tracer      tracing.Tracer
	jobs        *jobStore
	lanes       *lanes
	locks       *locks
	quar        *quarantine
	obs         *observer
	maxAttempts int                          // Config.MaxAttempts
	typeMax     map[lifecycle.JobType]int    // TypeConfig.MaxAttempts, where set
	userTypes   map[lifecycle.JobType]string // Config.Types, each to its queue
	rolling     bool                         // Config.RollingUpgrade
	hints       uniqueHints                  // unique jobs' generations seen
	hosts       callbackHosts                // Config.CallbackHosts
}

// checkRolling refuses, during a rolling upgrade (Config.RollingUpgrade),
// what a Worker of the previous release cannot read: a priority other
// than the default.
func (q *admission) checkRolling(n *NewJob) error {
	if q.rolling && n.Priority != 0 && n.Priority != lifecycle.DefaultPriority {
		return badJob("priority %d: this Queue writes only what the previous release reads (a rolling upgrade), and priorities are new", n.Priority)
	}
	return nil
}

// enqueue is Queue.Enqueue.
func (q *admission) enqueue(ctx context.Context, actor lifecycle.Actor, n NewJob) (_ lifecycle.Job, err error) {
	ctx, span := q.tracer.Start(ctx, tracing.SpanEnqueue, trace.SpanKindProducer)
	defer func() { endEnqueue(span, &n, err) }()
	if err := authority.Check(actor, authority.Jobs, authority.Create, authority.Scope{}); err != nil {
		return lifecycle.Job{}, err
	}
	if err := namedID(ctx, n.JobID); err != nil {
		return lifecycle.Job{}, err
	}
	if err := n.validate(q.maxAttemptsOf(n.JobType), q.userTypes); err != nil {
		return lifecycle.Job{}, err
	}
	if err := q.hosts.allow(n.Callback); err != nil {
		return lifecycle.Job{}, err
	}
	if err := q.checkRolling(&n); err != nil {
		return lifecycle.Job{}, err
	}
	if n.Unique != nil {
		return q.enqueueUnique(ctx, actor, &n) // &n: the span names the id it gets
	}
	return q.write(ctx, actor, n)
}

// endEnqueue ends the conveyor.enqueue span of n.
func endEnqueue(span tracing.Span, n *NewJob, err error) {
	span.String(tracing.AttrJobID, n.JobID)
	span.String(tracing.AttrJobType, string(n.JobType))
	span.String(tracing.AttrRunID, n.RunID)
	span.String(tracing.AttrMessagingSystem, tracing.MessagingSystem)
	span.String(tracing.AttrMessagingOperation, tracing.MessagingSend)
	lane := n.AgentSlug
	if lane == "" {
		lane = typeLane(n.JobType, n.Queue)
	}
	span.String(tracing.AttrMessagingDestination, lane)
	span.End(err)
}

// write is Enqueue past its checks: n is valid and actor may create it.
func (q *admission) write(ctx context.Context, actor lifecycle.Actor, n NewJob) (lifecycle.Job, error) {
	key, err := layout.JobKey(n.JobID)
	if err != nil {
		return lifecycle.Job{}, err
	}
	if q.store.CanCommit() {
		return q.commitOne(ctx, actor, n, key)
	}
	if err := q.locks.ensureAgent(ctx, n.AgentSlug); err != nil {
		return lifecycle.Job{}, err
	}
	now := q.clock.Now().UTC()
	doc, lane, err := newJobDoc(ctx, actor, n, now, 0, q.rolling)
	if err != nil {
		return lifecycle.Job{}, err
	}
	if err := q.jobs.existsBeforeCreate(ctx, key, n.JobID); err != nil {
		return lifecycle.Job{}, err
	}
	// The lane entry first, the job second (repair.go): a job in flight is
	// always in a lane or named by its agent's lock.
	undo, err := q.lanes.putLaneFirst(ctx, lane, n.JobID, n.readyAt(now))
	if err != nil {
		return lifecycle.Job{}, err
	}
	if _, err := records.Create(ctx, q.store, key, &doc); err != nil {
		undoUnlessLanded(undo, err)
		if errors.Is(err, storage.ErrPreconditionFailed) {
			return lifecycle.Job{}, fmt.Errorf("%w: %s", lifecycle.ErrJobExists, n.JobID)
		}
		return lifecycle.Job{}, err
	}
	q.lanes.relaneIfSlow(ctx, lane, n.JobID, now)
	q.lanes.laneAdded(n.AgentSlug, lane)
	q.obs.observe(nil, &doc, doc.Trail)
	// No audit write: QUEUED is no rest (see flushes); the two moves wait
	// in the trail for the write that brings the job to rest.
	return doc.Job, nil
}

// commitOne is write on a store that commits: a batch of one, its lock
// (if new), lane entry and record in one commit (commitBatch), so the job
// and its lane entry land at one instant and nothing is undone.
func (q *admission) commitOne(ctx context.Context, actor lifecycle.Actor, n NewJob, key string) (lifecycle.Job, error) {
	doc, lane, err := newJobDoc(ctx, actor, n, q.clock.Now().UTC(), 0, q.rolling)
	if err != nil {
		return lifecycle.Job{}, err
	}
	if err := q.jobs.existsBeforeCreate(ctx, key, n.JobID); err != nil {
		return lifecycle.Job{}, err
	}
	b := &batch{jobs: []NewJob{n}, docs: []jobDoc{doc}, keys: []string{key}, lanes: []string{lane}}
	if err := q.commitBatch(ctx, b); err != nil {
		if be, ok := errors.AsType[*lifecycle.BatchError](err); ok {
			return lifecycle.Job{}, be.Err // one job: the index says nothing
		}
		return lifecycle.Job{}, err
	}
	q.lanes.laneAdded(n.AgentSlug, lane)
	q.obs.observe(nil, &b.docs[0], b.docs[0].Trail)
	return b.docs[0].Job, nil
}

// newJobDoc is the record of n (valid) created at now+seq, and its lane
// entry's key: of its priority, ready at now+seq or, for a job to run
// later, at its run time (readyAt) plus seq (a batch's seq orders its jobs
// in their lanes). Validation is done, so the job is created already moved
// on to QUEUED: one write whose trail holds both moves. Its machine is
// its type's (the spec's for the NLM types, the general one for the
// user's; the spec's for every type when previous, during a rolling
// upgrade). Its trace context is ctx's.
func newJobDoc(ctx context.Context, actor lifecycle.Actor, n NewJob, now time.Time, seq time.Duration, previous bool) (jobDoc, string, error) {
	ready := n.readyAt(now).Add(seq)
	now = now.Add(seq)
	jobMachine := machine.JobMachineForType(n.JobType)
	if previous {
		jobMachine = machine.JobMachineSpecName // the one every release runs
	}
	doc := jobDoc{Job: lifecycle.Job{
		JobID: n.JobID, RunID: n.RunID, JobType: n.JobType, AgentSlug: n.AgentSlug,
		Status: lifecycle.JobPending, MaxAttempts: n.MaxAttempts, Payload: n.Payload, Context: n.Context,
		Callback: n.Callback, CreatedAt: now, UpdatedAt: now, ProjectID: n.ProjectID,
		Machine: jobMachine,
		Trail:   []lifecycle.JobMove{{From: "", To: lifecycle.JobPending, Event: "create", Actor: actor, At: now}},
	}}
	if err := fire(ctx, &doc, machine.EventValidate, lifecycle.ActorOrchestration); err != nil {
		return jobDoc{}, "", err
	}
	doc.Trail[len(doc.Trail)-1].At = now
	if n.Priority != lifecycle.DefaultPriority {
		doc.Priority = n.Priority // the default stays 0: the record reads as before priorities
	}
	if ready.After(now) {
		at := ready // a copy: &ready would move ready to the heap for every job
		doc.ScheduledAt = &at
	}
	lane := laneKeyOf(&doc.Job, ready)
	if lane == "" {
		return jobDoc{}, "", badJob("run time %s has no lane key", ready.Format(time.RFC3339Nano))
	}
	doc.QueuedAt, doc.ReadyKey = &now, lane
	doc.TraceParent = tracing.TraceParent(ctx)
	doc.TenantID = tenancy.Creating(ctx)
	return doc, lane, nil
}
