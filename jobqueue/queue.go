package jobqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/authority"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/codes"
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

// DefaultBackoff is the retry schedule of seed 003 §1.1: the wait in
// RETRY_BACKOFF after the first, second and third failed attempt.
func DefaultBackoff() []time.Duration {
	return []time.Duration{15 * time.Second, 30 * time.Second, 60 * time.Second}
}

// Config configures a Queue.
type Config struct {
	// Store holds the jobs, the ready lanes, the agent locks, the artifacts
	// and the audit log. Required.
	Store storage.Store
	// Artifacts writes the artifact at ARTIFACT_WRITE. Default: an
	// artifact.Store over Store with the same Clock and Node.
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
	// StepTimeout bounds each handler call. Default: 120 s (DESIGN.md §6).
	StepTimeout time.Duration
	// ArtifactActor is the actor ARTIFACT_WRITE writes the artifact as.
	// Seed 003 §4.2 lets only the NLM backend write new artifacts, and the
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
	// Types registers job types of the user's beside the seed's three
	// (RESEARCH, BRIEF, PROPOSAL_PREPROCESS): Enqueue accepts them, and
	// their artifact's type is the job type's name, its content checked by
	// the type's Validate. Names are ids (storage.ValidateID) and may not
	// be a seed type's. With Config.Artifacts set, that store must know
	// the types (artifact.Config.Types); the default store is given them.
	Types map[lifecycle.JobType]TypeConfig
	// Metrics receives the job metrics of seed 003 §5.3 (see Metrics);
	// default none.
	Metrics Metrics
}

// TypeConfig is a user job type (Config.Types).
type TypeConfig struct {
	// Handlers run the type's jobs; a nil CallNotebookLM means the
	// Handlers given to Claim.Run (the Worker's).
	Handlers Handlers
	// Validate checks the content of the type's artifact, which must be
	// JSON; nil accepts any JSON. An error sends the job to RETRY_BACKOFF
	// from ARTIFACT_WRITE (wrap it with Permanent to skip the retries).
	Validate func(content json.RawMessage) error
}

// Queue is the job queue of seed 003 §1 over a Store. Many Queues in many
// processes may share one Store: all coordination goes through conditional
// writes. It is safe for concurrent use.
type Queue struct {
	cfg       Config
	store     storage.Store
	artifacts *artifact.Store
	clock     clock.Clock
	log       *slog.Logger
	units     *core.Units // the handlers' calls, under StepTimeout
	userTypes map[lifecycle.JobType]bool

	quar *core.Quarantiner // poison records to quarantine, logged and counted

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
	// context allows (core.Patient); the claim's and the sweep's contexts
	// carry the deadlines.
	store := &core.Patient{Store: cfg.Store, Clock: cfg.Clock, Log: cfg.Logger}
	if cfg.Artifacts == nil {
		a, err := artifact.New(artifact.Config{Store: store, Clock: cfg.Clock, Node: cfg.Node, Logger: cfg.Logger, Types: contentTypes})
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
		units:  &core.Units{Clock: cfg.Clock, Log: cfg.Logger},
		quar:   &core.Quarantiner{Store: store, Clock: cfg.Clock, Log: cfg.Logger},
		agents: map[string]*agentState{}, audited: map[string]int64{},
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
		if _, seed := ArtifactType(t); seed {
			return nil, fmt.Errorf("%w: Types: %s is a seed job type", ErrInvalidConfig, t)
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

// backoff is the wait after failed attempt n (1-based).
func (q *Queue) backoff(attempt int) time.Duration {
	i := attempt - 1
	if i < 0 {
		i = 0
	}
	if i >= len(q.cfg.Backoff) {
		i = len(q.cfg.Backoff) - 1
	}
	return q.cfg.Backoff[i]
}

// Errors of the queue. Bad input matches ErrInvalidJob; refusals of the
// authority matrix match authority.ErrForbidden.
var (
	// ErrInvalidConfig: a Config that New refuses.
	ErrInvalidConfig = errors.New("jobqueue: invalid config")
	// ErrInvalidJob: a NewJob that breaks a rule of Enqueue.
	ErrInvalidJob = errors.New("jobqueue: invalid job")
	// ErrJobExists: Enqueue with the id of a job that already exists.
	ErrJobExists = errors.New("jobqueue: job already exists")
	// ErrLeaseLost: the worker's lease on the job lapsed or was taken over;
	// it may no longer write the job. It is records.ErrLeaseLost, the one
	// sentinel of the SDK.
	ErrLeaseLost = records.ErrLeaseLost
	// ErrStepTimeout is the cause of a step's context when StepTimeout runs out.
	ErrStepTimeout = errors.New("jobqueue: step timeout")
)

// ---- keys ----

// The queue's keys are built in storage's layout (issue 10 G): jobs under
// layout.JobsPrefix, lanes, agent locks and the sweep lease under
// layout.QueuePrefix, so listing jobs/ yields only jobs.
const (
	lanePrefix  = layout.LanesPrefix
	agentPrefix = layout.AgentLocksPrefix
)

// laneKey is layout.LaneKey of ids already validated.
func laneKey(agent string, at time.Time, jobID string) string {
	k, _ := layout.LaneKey(agent, at, jobID)
	return k
}

// parseLaneKey returns the ready time and job id of a lane key.
func parseLaneKey(key string) (time.Time, string, bool) {
	_, at, id, ok := layout.ParseLaneKey(key)
	return at, id, ok
}

// ---- records ----

// jobDoc is the stored form of a Job: the record plus the document version.
type jobDoc struct {
	records.Meta
	lifecycle.Job
	// AuditArtifact is the artifact whose creation event is still to be
	// flushed with the trail (the artifact store was told not to write it,
	// artifact.Draft.Audited); emitted before the move out of
	// ARTIFACT_WRITE.
	AuditArtifact string `json:"audit_artifact,omitempty"`
	// RanEpoch is the agent-lock epoch of the last claim that ended the
	// job's run (its commit or its failure): a lock of that epoch naming
	// the job is free, though not released (see Claim.end).
	RanEpoch int64 `json:"ran_epoch,omitempty"`
}

// agentLock is queue/agents/{agent}.json (layout.AgentLockKey): which worker runs the agent's job,
// under which fencing epoch, until when. It gives at most one running job
// per agent across every worker sharing the store.
type agentLock struct {
	records.Meta
	Agent     string    `json:"agent"`
	Owner     string    `json:"owner,omitempty"`
	Epoch     int64     `json:"epoch"`
	JobID     string    `json:"job_id,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

func (l *agentLock) free(now time.Time) bool { return l.Owner == "" || !now.Before(l.ExpiresAt) }

// laneEntry is the value of a lane key.
type laneEntry struct {
	JobID   string    `json:"job_id"`
	ReadyAt time.Time `json:"ready_at"`
}

// ---- enqueue ----

// NewJob is what Enqueue needs; the queue fills in the rest of the record.
// Ids are storage ids (storage.ValidateID); Payload is JSON of at most
// codes.MaxDocumentBytes, the URLs at most codes.MaxURLBytes, and
// Context.EntityRefs at most codes.MaxListLen refs of
// codes.MaxRefBytes, all valid UTF-8 without NUL or control characters.
type NewJob struct {
	// JobID is the job's id; empty means a fresh UUID v4.
	JobID     string
	RunID     string
	JobType   lifecycle.JobType
	AgentSlug string
	// MaxAttempts is max_attempts; 0 means Config.MaxAttempts.
	MaxAttempts int
	Payload     json.RawMessage
	Context     lifecycle.JobContext
	// Callback is an http or https URL, or empty.
	Callback string
	// ProjectID is the artifact's cid; empty means Config.Project.
	ProjectID string
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func badJob(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidJob, fmt.Sprintf(format, args...))
}

func (n *NewJob) validate(defaultMax int, user map[lifecycle.JobType]bool) error {
	// Text first: a job type of invalid UTF-8 is INVALID_INPUT, as every
	// other field's, not an unknown type.
	if err := n.checkText(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if n.JobID == "" {
		n.JobID = newUUID()
	}
	if err := storage.ValidateID("job id", n.JobID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if err := storage.ValidateID("run id", n.RunID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if err := storage.ValidateID("agent slug", n.AgentSlug); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if n.ProjectID != "" {
		if err := storage.ValidateID("project id", n.ProjectID); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	if _, ok := ArtifactType(n.JobType); !ok && !user[n.JobType] {
		return badJob("job_type %q is not RESEARCH, BRIEF, PROPOSAL_PREPROCESS or a type of Config.Types", n.JobType)
	}
	if n.MaxAttempts == 0 {
		n.MaxAttempts = defaultMax
	}
	if n.MaxAttempts < 1 || n.MaxAttempts > 100 {
		return badJob("max_attempts %d outside 1..100", n.MaxAttempts)
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

// checkText bounds the free text of a job (issue 10 F) before anything
// else looks at it: the job type (MaxNameBytes), the payload
// (MaxDocumentBytes, codes.CheckJSON), the URLs (MaxURLBytes) and the
// entity refs (MaxListLen of MaxRefBytes each), all clean UTF-8.
// It returns nil or a *codes.InputError.
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

// artifactType is the artifact type of a job of type t: the seed's
// mapping, or the user type's own name.
func (q *Queue) artifactType(t lifecycle.JobType) artifact.Type {
	if a, ok := ArtifactType(t); ok {
		return a
	}
	return artifact.Type(t)
}

// ArtifactType maps a job type to the artifact type it produces:
// RESEARCH → RESEARCH_BRIEF, BRIEF → BRIEF, PROPOSAL_PREPROCESS →
// PREPROCESSED_PROPOSAL.
func ArtifactType(t lifecycle.JobType) (artifact.Type, bool) {
	switch t {
	case lifecycle.JobResearch:
		return artifact.ResearchBrief, true
	case lifecycle.JobBrief:
		return artifact.Brief, true
	case lifecycle.JobProposalPreprocess:
		return artifact.PreprocessedProposal, true
	}
	return "", false
}

// Enqueue creates a job in PENDING, validates it and moves it to QUEUED
// (003 §1.2: PENDING → QUEUED after validation), and puts it in its
// agent's ready lane. Validation comes before any write, so the job is
// written once, already QUEUED, with both moves in its audit. The actor
// needs Create (003 §4.1: the gateway or the orchestration layer); the
// move to QUEUED is the orchestration layer's, which the queue is. Invalid input (ErrInvalidJob) or a refusal
// (authority.ErrForbidden) writes nothing; an existing id gives ErrJobExists.
func (q *Queue) Enqueue(ctx context.Context, actor lifecycle.Actor, n NewJob) (lifecycle.Job, error) {
	if err := authority.Check(actor, authority.Jobs, authority.Create, authority.Scope{}); err != nil {
		return lifecycle.Job{}, err
	}
	if err := n.validate(q.cfg.MaxAttempts, q.userTypes); err != nil {
		return lifecycle.Job{}, err
	}
	key, err := layout.JobKey(n.JobID)
	if err != nil {
		return lifecycle.Job{}, err
	}
	if err := q.ensureAgent(ctx, n.AgentSlug); err != nil {
		return lifecycle.Job{}, err
	}
	now := q.clock.Now().UTC()
	doc := jobDoc{Job: lifecycle.Job{
		JobID: n.JobID, RunID: n.RunID, JobType: n.JobType, AgentSlug: n.AgentSlug,
		Status: lifecycle.JobPending, MaxAttempts: n.MaxAttempts, Payload: n.Payload, Context: n.Context,
		Callback: n.Callback, CreatedAt: now, UpdatedAt: now, ProjectID: n.ProjectID,
		Trail: []lifecycle.JobMove{{From: "", To: lifecycle.JobPending, Event: "create", Actor: actor, At: now}},
	}}
	// Validation is done, so the job is created already moved on to
	// QUEUED: one write whose trail holds both moves.
	if err := q.fire(ctx, &doc, lifecycle.EventValidate, lifecycle.ActorOrchestration); err != nil {
		return lifecycle.Job{}, err
	}
	doc.Trail[len(doc.Trail)-1].At = now
	lane := laneKey(n.AgentSlug, now, n.JobID)
	doc.QueuedAt, doc.ReadyKey = &now, lane
	// The lane entry first, the job second (active.go): a job in flight is
	// always in a lane or named by its agent's lock.
	undo, err := q.putLaneFirst(ctx, lane, n.JobID, now)
	if err != nil {
		return lifecycle.Job{}, err
	}
	if _, err := records.Create(ctx, q.store, key, &doc); err != nil {
		undo()
		if errors.Is(err, storage.ErrPreconditionFailed) {
			return lifecycle.Job{}, fmt.Errorf("%w: %s", ErrJobExists, n.JobID)
		}
		return lifecycle.Job{}, err
	}
	q.relaneIfSlow(ctx, lane, n.JobID, now)
	q.laneAdded(n.AgentSlug, lane)
	q.observe(nil, &doc, doc.Trail)
	// No audit write: QUEUED is no rest (see flushes); the two moves wait
	// in the trail for the write that brings the job to rest.
	return doc.Job, nil
}

func (q *Queue) ensureAgent(ctx context.Context, agent string) error {
	a := q.agent(agent)
	a.mu.Lock()
	exists := a.lockExists
	a.mu.Unlock()
	if exists {
		return nil
	}
	key, err := layout.AgentLockKey(agent)
	if err != nil {
		return err
	}
	// Read first: a lock another process (or an earlier life of this one)
	// made costs a read, not a refused write.
	_, _, err = q.store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		_, err = records.Create(ctx, q.store, key, &agentLock{Agent: agent})
	}
	if err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		return err
	}
	a.mu.Lock()
	a.lockExists = true
	a.mu.Unlock()
	return nil
}

func (q *Queue) putLane(ctx context.Context, key, jobID string, at time.Time) error {
	b, _ := json.Marshal(laneEntry{JobID: jobID, ReadyAt: at.UTC()})
	_, err := q.store.Put(ctx, key, b, storage.IfNotExists())
	if errors.Is(err, storage.ErrPreconditionFailed) {
		err = nil
	}
	if agent, ok := layout.LaneAgent(key); ok && err == nil {
		q.laneAdded(agent, key)
	}
	return err
}

// laneAdded puts a key this Queue wrote into agent's cache, in order,
// when the cache would otherwise miss it (the cache held the whole lane,
// or the key sorts before its last entry), and schedules a look at the
// agent when the key becomes ready.
func (q *Queue) laneAdded(agent, key string) {
	a := q.agent(agent)
	a.mu.Lock()
	if !a.listedAt.IsZero() {
		i, found := slices.BinarySearch(a.keys, key)
		if !found && (a.complete || i < len(a.keys)) {
			a.keys = slices.Insert(a.keys, i, key)
			a.idle = 0
		}
	}
	a.mu.Unlock()
	if at, _, ok := parseLaneKey(key); ok {
		q.schedule(a, at)
	}
}

// ---- reads ----

// read reads a job; a poison record is quarantined and reads as missing
// (ErrNotFound), with the quarantine logged and counted.
func (q *Queue) read(ctx context.Context, jobID string) (jobDoc, storage.Version, error) {
	key, err := layout.JobKey(jobID)
	if err != nil {
		return jobDoc{}, "", err
	}
	rec := q.jobRecord(key)
	d, v, err := rec.Load(ctx)
	if err = q.poison(ctx, err); err != nil {
		return jobDoc{}, "", err
	}
	return d, v, nil
}

// jobRecord is the job at key as the core writes it: validated on every
// read, so a record that is not a job of this key is poison.
func (q *Queue) jobRecord(key string) *core.Record[jobDoc, *jobDoc] {
	return &core.Record[jobDoc, *jobDoc]{Store: q.store, Key: key, Validate: func(d *jobDoc) error { return validJob(key, d) }}
}

// validJob refuses a decoded job that cannot be this key's job.
func validJob(key string, d *jobDoc) error {
	id, _ := layout.JobIDFromKey(key)
	switch {
	case d.JobID != id:
		return fmt.Errorf("job_id %q in the record of %q", d.JobID, id)
	case !slices.Contains(lifecycle.JobStates(), d.Status):
		return fmt.Errorf("unknown status %q", d.Status)
	case storage.ValidateID("agent slug", d.AgentSlug) != nil:
		return fmt.Errorf("invalid agent_slug %q", d.AgentSlug)
	case d.ReadyKey != "" && !strings.HasPrefix(d.ReadyKey, lanePrefix+d.AgentSlug+"/"):
		return fmt.Errorf("ready_key %q outside the agent's lane", d.ReadyKey)
	}
	return nil
}

// poison quarantines the record of a *records.CorruptError and turns the
// error into ErrNotFound for the caller, which goes on as if the record were
// gone: a poison record never blocks anything. Other errors pass.
func (q *Queue) poison(ctx context.Context, err error) error {
	var ce *records.CorruptError
	if !errors.As(err, &ce) {
		return err
	}
	qkey, qerr := q.quar.Move(ctx, ce)
	if qerr != nil && !errors.Is(qerr, storage.ErrPreconditionFailed) {
		return qerr
	}
	if qerr == nil {
		q.quarantined(ce.Key)
	}
	return fmt.Errorf("jobqueue: %w (quarantined at %s): %w", storage.ErrNotFound, qkey, err)
}

// QuarantinedError is the error of a job whose record was poison and was
// moved under records.QuarantinePrefix (by this read or an earlier one): Get
// and Requeue give it, as the Runner gives run.QuarantinedError for a run,
// so a client learns the job is quarantined, not that it never existed. An
// operator may repair and restore the record (records.Restore). It matches
// records.ErrCorrupt and, as a job the queue can no longer see,
// storage.ErrNotFound; its code is RECORD_QUARANTINED (410).
type QuarantinedError struct {
	JobID string
	// Key is where the record was; QKey where its copy is kept.
	Key, QKey string
	Reason    string
}

// Error names the job and the reason.
func (e *QuarantinedError) Error() string {
	msg := "jobqueue: job " + e.JobID + ": record quarantined"
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.QKey != "" {
		msg += " (at " + e.QKey + ")"
	}
	return msg
}

// Is matches records.ErrCorrupt and storage.ErrNotFound.
func (e *QuarantinedError) Is(target error) bool {
	return target == records.ErrCorrupt || target == storage.ErrNotFound
}

// Code is RECORD_QUARANTINED, as records.CorruptError's.
func (e *QuarantinedError) Code() string { return (&records.CorruptError{}).Code() }

// quarantinedOr turns the not-found of a job whose record is in quarantine
// into a *QuarantinedError; any other error is returned as it is.
func (q *Queue) quarantinedOr(ctx context.Context, jobID string, err error) error {
	if !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	key, kerr := layout.JobKey(jobID)
	if kerr != nil {
		return err
	}
	for qkey, lerr := range q.store.List(ctx, records.QuarantinePrefix+key+"/") {
		if lerr != nil {
			return err
		}
		qe := &QuarantinedError{JobID: jobID, Key: key, QKey: qkey}
		if rec, rerr := records.ReadQuarantined(ctx, q.store, qkey); rerr == nil {
			qe.Reason = rec.Reason
		}
		return qe
	}
	return err
}

// Quarantined counts the records this Queue moved to quarantine.
func (q *Queue) Quarantined() int64 { return q.quar.Count() }

// ownJob is the "own job" of the NLM backend in 003 §4.1: the job the
// orchestration layer has handed to it, which is the job in NOTEBOOKLM_CALL.
func ownJob(actor lifecycle.Actor, j *lifecycle.Job) bool {
	return actor == lifecycle.ActorNLMBackend && j.Status == lifecycle.JobNotebookLMCall
}

// Get reads a job. The actor needs Read (003 §4.1); the NLM backend may
// read only its own job, one in NOTEBOOKLM_CALL.
func (q *Queue) Get(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.Job, error) {
	if authority.Lookup(actor, authority.Jobs, authority.Read) == authority.Denied {
		return lifecycle.Job{}, authority.Check(actor, authority.Jobs, authority.Read, authority.Scope{})
	}
	d, _, err := q.read(ctx, jobID)
	if err != nil {
		return lifecycle.Job{}, q.quarantinedOr(ctx, jobID, err)
	}
	if err := authority.Check(actor, authority.Jobs, authority.Read, authority.Scope{Own: ownJob(actor, &d.Job)}); err != nil {
		return lifecycle.Job{}, err
	}
	return d.Job, nil
}

// List yields every job in key order. The actor needs Read without
// qualification (the NLM backend may not list jobs).
func (q *Queue) List(ctx context.Context, actor lifecycle.Actor) iter.Seq2[lifecycle.Job, error] {
	return func(yield func(lifecycle.Job, error) bool) {
		if err := authority.Check(actor, authority.Jobs, authority.Read, authority.Scope{}); err != nil {
			yield(lifecycle.Job{}, err)
			return
		}
		for d, err := range q.docs(ctx) {
			if !yield(d.Job, err) || err != nil {
				return
			}
		}
	}
}

func (q *Queue) docs(ctx context.Context) iter.Seq2[jobDoc, error] {
	return func(yield func(jobDoc, error) bool) {
		for key, err := range q.store.List(ctx, layout.JobsPrefix) {
			if err != nil {
				yield(jobDoc{}, err)
				return
			}
			id, ok := layout.JobIDFromKey(key)
			if !ok {
				continue
			}
			d, _, err := q.read(ctx, id)
			if errors.Is(err, storage.ErrNotFound) {
				continue
			}
			if !yield(d, err) || err != nil {
				return
			}
		}
	}
}

// ---- writes ----

// fire moves d by event as actor and appends the move to d's trail.
func (q *Queue) fire(ctx context.Context, d *jobDoc, event lifecycle.Event, actor lifecycle.Actor) error {
	ch, err := lifecycle.JobMachine().Fire(ctx, &d.Job, event, actor)
	if err != nil {
		return err
	}
	d.Trail = append(d.Trail, lifecycle.JobMove{From: ch.From, To: ch.To, Event: event, Actor: actor})
	return nil
}

// update is every job write: mutate on the record, updated_at never
// going back, a compare-and-swap write, then, when the write brings the
// job to rest, the audit object of its trail. When the caller holds the
// document as it last wrote it (cached, at version ver) the write goes
// straight to If-Match; on a conflict, or without a cache, core.Record
// reads first.
//
// The trail (Job.Trail) holds the moves not yet in the audit log: the
// moves since the job last came to rest. A write that leaves a rest state
// first makes sure the rest's audit object exists (a writer that died
// between its write and its flush leaves no gap), then starts the trail
// afresh; any other write carries the trail on and adds its moves.
func (q *Queue) update(ctx context.Context, jobID string, cached *jobDoc, ver storage.Version, mutate func(d *jobDoc, now time.Time) error) (jobDoc, storage.Version, error) {
	return q.updateFenced(ctx, jobID, cached, ver, "", 0, mutate)
}

// updateFenced is update for an owner: the write is refused with
// ErrLeaseLost unless the job still carries the lease (owner, epoch).
func (q *Queue) updateFenced(ctx context.Context, jobID string, cached *jobDoc, ver storage.Version, owner string, epoch int64, mutate func(d *jobDoc, now time.Time) error) (jobDoc, storage.Version, error) {
	key, err := layout.JobKey(jobID)
	if err != nil {
		return jobDoc{}, "", err
	}
	rec := q.jobRecord(key)
	rec.Owner, rec.Epoch, rec.Lease = owner, epoch, func(d *jobDoc) *records.Lease { return d.Lease }
	if epoch > 0 {
		rec.Now = q.clock.Now
	}
	if cached != nil && ver != "" {
		// Mutations replace pointer fields rather than write through them,
		// so the record's shallow copies leave the cache intact.
		rec.Seed(*cached, ver)
	}
	carried := 0
	prior, d, err := rec.Apply(ctx, func(d *jobDoc) error {
		now := q.clock.Now().UTC()
		if now.Before(d.UpdatedAt) {
			now = d.UpdatedAt
		}
		if flushes(d.Status) && (len(d.Trail) > 0 || d.AuditArtifact != "") {
			if err := q.ensureFlushed(ctx, d); err != nil {
				return err
			}
			d.Trail, d.AuditArtifact = nil, ""
		}
		d.Trail = slices.Clip(d.Trail) // appends must not write into the cached document's array
		carried = len(d.Trail)
		if err := mutate(d, now); err != nil {
			return err
		}
		for i := carried; i < len(d.Trail); i++ {
			d.Trail[i].At = now
		}
		if len(d.Trail) > carried {
			d.UpdatedAt = now
		}
		return nil
	})
	if err = q.poison(ctx, err); err != nil {
		return jobDoc{}, "", err
	}
	_, nv := rec.Snapshot()
	q.observe(&prior, &d, d.Trail[carried:])
	if flushes(d.Status) {
		// The write is done: its audit object is written even if ctx ends
		// meanwhile (a Worker stopping), within StopGrace, so a stop does
		// not leave the job for a repair (active.go).
		fctx, cancel := q.afterStop(ctx)
		q.flush(fctx, &d)
		cancel()
	}
	return d, nv, nil
}

// flushes tells whether a job at rest in s has its trail written to the
// audit log: COMPLETE and DEAD (the end), RETRY_BACKOFF (the wait). A job
// at rest nowhere else: QUEUED is left by the next claim, FAILED by the
// bury that follows at once, the pipeline states by the claim's next write,
// and their moves go with that write's.
func flushes(s lifecycle.JobState) bool {
	return s == lifecycle.JobComplete || s == lifecycle.JobDead || s == lifecycle.JobRetryBackoff
}

// ensureAudited makes sure the audit object of d's trail exists when d is
// at rest (Sweep's repair of a writer that died before its flush); the
// moves of a job not at rest are in its record, to be flushed later.
func (q *Queue) ensureAudited(ctx context.Context, d *jobDoc) {
	if err := q.ensureAuditedErr(ctx, d); err != nil {
		q.log.ErrorContext(ctx, "jobqueue: audit write failed", "job_id", d.JobID, "err", err)
	}
}

// ensureAuditedErr is ensureAudited, failing when the object is missing
// and could not be written.
func (q *Queue) ensureAuditedErr(ctx context.Context, d *jobDoc) error {
	if !flushes(d.Status) || len(d.Trail) == 0 {
		return nil
	}
	err := q.ensureFlushed(ctx, d)
	if err != nil {
		q.mu.Lock()
		q.auditGap(d.JobID, d.Version, true)
		q.mu.Unlock()
	}
	return err
}

// ensureFlushed makes sure the audit object of d (at rest, at its
// version) exists: known written by this Queue, found, or written now.
func (q *Queue) ensureFlushed(ctx context.Context, d *jobDoc) error {
	q.mu.Lock()
	done := q.audited[d.JobID] >= d.Version
	q.mu.Unlock()
	if done {
		return nil
	}
	key, b, err := q.auditObject(d)
	if err != nil || key == "" {
		return err
	}
	if err := core.EnsureAudit(ctx, q.store, key, b); err != nil {
		return err
	}
	q.flushed(d)
	return nil
}

// flush writes the audit object of d's trail, d having just come to rest.
// A failure is logged: the record keeps the trail, and the next writer or
// Sweep writes the object (ensureFlushed).
func (q *Queue) flush(ctx context.Context, d *jobDoc) {
	key, b, err := q.auditObject(d)
	if err == nil && key != "" {
		err = q.putAudit(ctx, key, b)
	}
	if err != nil {
		q.log.ErrorContext(ctx, "jobqueue: audit write failed", "job_id", d.JobID, "status", d.Status, "err", err)
		q.mu.Lock()
		q.auditGap(d.JobID, d.Version, true) // the claim does not settle the job (active.go)
		q.mu.Unlock()
		return
	}
	q.flushed(d)
}

// flushed notes that d's audit object exists.
func (q *Queue) flushed(d *jobDoc) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.auditGap(d.JobID, d.Version, false)
	if q.audited[d.JobID] < d.Version {
		q.audited[d.JobID] = d.Version
	}
	if lifecycle.JobMachine().IsTerminal(d.Status) {
		delete(q.audited, d.JobID)
	}
}

// auditObject is the audit object of d's trail (003 §5.1, one event per
// move, and the artifact's creation before the move out of
// ARTIFACT_WRITE): the last event with the others as its Prior
// (records.AuditEvent.Expand), under an id made of the last move's time,
// the job and the record's version, so every writer that writes it writes
// the same object once. key is "" for an empty trail.
func (q *Queue) auditObject(d *jobDoc) (key string, b []byte, err error) {
	var evs []records.AuditEvent
	for _, m := range d.Trail {
		if m.From == lifecycle.JobArtifactWrite && d.AuditArtifact != "" {
			evs = append(evs, records.AuditEvent{TS: m.At, Event: "artifact.create", Actor: string(q.cfg.ArtifactActor),
				JobID: d.JobID, RunID: d.RunID, ArtifactID: d.AuditArtifact, To: "finalized", Node: q.cfg.Node})
		}
		ev := records.AuditEvent{
			TS: m.At, Event: "job.status.update", Actor: string(m.Actor), JobID: d.JobID, RunID: d.RunID,
			From: string(m.From), To: string(m.To), Node: q.cfg.Node,
		}
		if m.From == "" {
			ev.Event = "job.create"
		}
		if m.To == lifecycle.JobComplete {
			ev.ArtifactID = d.ArtifactID
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		return "", nil, nil
	}
	last := evs[len(evs)-1]
	last.Prior = evs[:len(evs)-1]
	key, err = layout.AuditKey(last.TS, records.AuditEventID(last.TS, d.JobID, d.Version, 0))
	if err != nil {
		return "", nil, err
	}
	b, err = json.Marshal(last)
	return key, b, err
}

func (q *Queue) putAudit(ctx context.Context, key string, b []byte) error {
	return core.PutAudit(ctx, q.store, key, b)
}

// Requeue is the operator's manual requeue (003 §1.2 FAILED → QUEUED, and
// the extension DEAD → QUEUED, invariant F2). Only the admin may make it:
// the matrix lets the orchestration layer update status too, but the job
// machine gives this move to the admin alone, so anyone else gets a
// FORBIDDEN error and nothing is written. The job starts over with a fresh
// set of attempts (attempt 0) and its error cleared.
func (q *Queue) Requeue(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.Job, error) {
	if err := authority.Check(actor, authority.Jobs, authority.UpdateStatus, authority.Scope{}); err != nil {
		return lifecycle.Job{}, err
	}
	// The lane entry first, the job second (active.go): the job's agent
	// comes from a read before the write.
	cur, ver, err := q.read(ctx, jobID)
	if err != nil {
		return lifecycle.Job{}, q.quarantinedOr(ctx, jobID, err)
	}
	probe := cur
	probe.Trail = nil
	if err := q.fire(ctx, &probe, lifecycle.EventRequeue, actor); err != nil {
		return lifecycle.Job{}, err // refused as the record stands: no lane entry written
	}
	if err := q.ensureAgent(ctx, cur.AgentSlug); err != nil {
		return lifecycle.Job{}, err
	}
	at := q.clock.Now().UTC()
	lane := laneKey(cur.AgentSlug, at, jobID)
	undo, err := q.putLaneFirst(ctx, lane, jobID, at)
	if err != nil {
		return lifecycle.Job{}, err
	}
	d, _, err := q.update(ctx, jobID, &cur, ver, func(d *jobDoc, now time.Time) error {
		if d.AgentSlug != cur.AgentSlug {
			return fmt.Errorf("jobqueue: job %s changed agent", jobID)
		}
		if err := q.fire(ctx, d, lifecycle.EventRequeue, actor); err != nil {
			return err
		}
		d.Attempt, d.Error, d.ErrorCode, d.FailedStep = 0, nil, "", ""
		d.QueuedAt, d.ReadyKey, d.NextAttemptAt, d.Lease = &now, lane, nil, nil
		return nil
	})
	if err != nil {
		undo()
		return lifecycle.Job{}, err
	}
	q.relaneIfSlow(ctx, lane, jobID, at)
	q.laneAdded(cur.AgentSlug, lane)
	return d.Job, nil
}
