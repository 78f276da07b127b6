package nlm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/hookpost"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/quarantine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Callback statuses.
const (
	callbackComplete = "COMPLETE"
	callbackFailed   = "FAILED"
)

// Stages are the NLM backend's pipeline steps, supplied by the service.
// Each is optional except Query; a nil stage passes its input on. Each runs
// as one unit of the execution core under its Config deadline: at the
// deadline the job goes to ERROR whether or not the code returns, and code
// that ignores its ctx is left behind (logged as a straggler), its result
// dropped.
//
// A job taken over from a lost processor replays the stages before the one
// it was in (their results are not stored), so each stage must be safe to
// run again: loading context, building a prompt and asking NotebookLM are
// reads, and the artifact is created once per job.
type Stages struct {
	// FetchContext is FETCHING_CONTEXT: load the context snapshot.
	FetchContext func(ctx context.Context, req lifecycle.NLMRequest) (json.RawMessage, error)
	// BuildPrompt is BUILDING_PROMPT: the prompt from context and query.
	BuildPrompt func(ctx context.Context, req lifecycle.NLMRequest, snapshot json.RawMessage) (string, error)
	// Query is NLM_QUERY: the HTTP call to NotebookLM. Required.
	Query func(ctx context.Context, req lifecycle.NLMRequest, prompt string) (json.RawMessage, error)
	// Structure is STRUCTURING: parse the answer into artifact content.
	// Nil means the answer is the content.
	Structure func(ctx context.Context, req lifecycle.NLMRequest, answer json.RawMessage) (lifecycle.JobOutput, error)
}

// Poster posts a callback; *http.Client is one.
type Poster interface {
	Do(req *http.Request) (*http.Response, error)
}

// Config configures a Processor. Only Store is required.
type Config struct {
	// Store holds the job records (nlm/jobs/{job_id}.json), the index of
	// jobs in flight (nlm/active/{job_id}), the artifacts and the audit log.
	// The processor retries its transient failures, with backoff, for as
	// long as the job's context allows.
	Store *storage.Store
	// Owner names this processor in leases; it must differ between the
	// processors sharing Store. Default: the host name and the process id.
	Owner string
	// Artifacts writes the artifacts. Default: an artifact.Store over Store.
	Artifacts *artifact.Store
	// Project is the cid of artifacts of requests without one. Default
	// lifecycle.DefaultProject.
	Project string
	// CallbackURL is the callback of the requests accepted without one
	// (Ask builds them so): where Sink is served. Default none (the request
	// must name one).
	CallbackURL string
	// Client posts the callbacks. Default: an *http.Client.
	Client Poster
	// CallbackAttempts is how often a callback is tried before the job goes
	// to ERROR. Default 3.
	CallbackAttempts int
	// CallbackBackoff is the wait between callback attempts, doubling each
	// time. Default 1 s.
	CallbackBackoff time.Duration

	// Per-stage deadlines: each stage's code runs under its own. At the
	// deadline the job takes the machine's ERROR edge (docs/spec.md#nlm-job-lifecycle has no
	// retry) and the FAILED callback is sent. Defaults: FetchTimeout 30 s,
	// PromptTimeout 10 s, QueryTimeout 60 s (the P95 SLO of an NLM call,
	// docs/spec.md#metrics), StructureTimeout 30 s (Structure and the artifact's
	// write), CallbackTimeout 10 s per attempt.
	FetchTimeout     time.Duration
	PromptTimeout    time.Duration
	QueryTimeout     time.Duration
	StructureTimeout time.Duration
	CallbackTimeout  time.Duration

	// LeaseTTL is how long a job's lease lasts unless renewed; the
	// heartbeat renews it every LeaseTTL/3. Another processor takes over a
	// job whose lease lapsed. Default 2 min.
	LeaseTTL time.Duration
	// MaxTakeovers bounds how often a job is taken over from a lost
	// processor and resumed; the next takeover sends it to ERROR, so a job
	// that kills its processor cannot kill them all. Default 2.
	MaxTakeovers int
	// PollInterval is the longest wait between Run's looks for jobs it was
	// not handed (accepted by another process, or held by a lost
	// processor): it looks soon after a look that found some, then less and
	// less often. Default 1 s.
	PollInterval time.Duration
	// Concurrency is how many jobs Run processes at once. Default 4.
	Concurrency int
	// StopGrace bounds, in wall-clock time, what Run does after its context
	// ended: handing back the leases of interrupted jobs and waiting for
	// stage goroutines that ignore their context. Default 5 s.
	StopGrace time.Duration

	// Clock stamps records and times deadlines, leases and retries.
	// Default: the wall clock.
	Clock clock.Clock
	// Node names this host in audit events.
	Node string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Processor is the NLM backend side (docs/spec.md#nlm-job-lifecycle), on the execution core.
// Accept registers a job (ACCEPTED); Run, or Process for one job, picks it
// up under a lease (owner, epoch, expiry) renewed by heartbeat and runs
// FETCHING_CONTEXT → BUILDING_PROMPT → NLM_QUERY → STRUCTURING (the job's
// artifact, created once), posts the callback with the artifact id
// (CALLBACK) and ends DONE; a failing or overrunning stage sends the job
// to ERROR and the callback says FAILED. Every write is a read-check-write
// fenced by the lease, so a processor that lost its lease (paused past it,
// and another took the job over with epoch+1) gets lifecycle.ErrLeaseLost and
// writes nothing; every move is audited. Records that cannot be decoded or
// fail validation are quarantined (quarantine) and never block
// other jobs.
type Processor struct {
	cfg    Config
	stages Stages
	store  *storage.Store // patient
	units  *deadline.Units
	quar   *quarantine.Mover
	// absent holds the jobs in flight read missing on a store that
	// settles, until their absence is confirmed (evidence.Absence): an index
	// entry, a job's only pointer, goes only then.
	absent evidence.Absence

	mu      sync.Mutex
	pending []string        // handed by Accept, not started yet
	running map[string]bool // jobs this processor's Run works on
	wake    chan struct{}
}

// New checks cfg and stages and returns a processor.
func New(cfg Config, stages Stages) (*Processor, error) {
	if cfg.Store == nil || stages.Query == nil {
		return nil, errors.New("nlm: Config.Store and Stages.Query are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		cfg.Owner = fmt.Sprintf("%s-%d", orDefault(host, "nlm"), os.Getpid())
	}
	if cfg.Project == "" {
		cfg.Project = lifecycle.DefaultProject
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	defaults := []struct {
		d   *time.Duration
		def time.Duration
	}{
		{&cfg.CallbackBackoff, time.Second}, {&cfg.FetchTimeout, 30 * time.Second}, {&cfg.PromptTimeout, 10 * time.Second},
		{&cfg.QueryTimeout, 60 * time.Second}, {&cfg.StructureTimeout, 30 * time.Second}, {&cfg.CallbackTimeout, 10 * time.Second},
		{&cfg.LeaseTTL, 2 * time.Minute}, {&cfg.PollInterval, time.Second}, {&cfg.StopGrace, 5 * time.Second},
	}
	for _, d := range defaults {
		if *d.d <= 0 {
			*d.d = d.def
		}
	}
	if cfg.CallbackAttempts <= 0 {
		cfg.CallbackAttempts = 3
	}
	if cfg.MaxTakeovers <= 0 {
		cfg.MaxTakeovers = 2
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	for _, id := range [][2]string{{"owner", cfg.Owner}, {"project id", cfg.Project}} {
		if err := storekey.ValidateID(id[0], id[1]); err != nil {
			return nil, fmt.Errorf("nlm: %w", err)
		}
	}
	p := &Processor{cfg: cfg, stages: stages, running: map[string]bool{}, wake: make(chan struct{}, 1)}
	p.store = cfg.Store.Patient(storage.Retry{Clock: cfg.Clock, Log: cfg.Logger})
	p.units = &deadline.Units{Clock: cfg.Clock, Log: cfg.Logger}
	p.quar = &quarantine.Mover{Store: p.store, Clock: cfg.Clock, Log: cfg.Logger}
	p.absent.Settle = cfg.Store.SettleTime()
	if p.cfg.Artifacts == nil {
		a, err := artifact.New(artifact.Config{Store: p.store, Clock: cfg.Clock, Node: cfg.Node, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		p.cfg.Artifacts = a
	}
	return p, nil
}

// Keys are the layout's: the index of NLM jobs in flight (so no pass reads
// finished history).
const activePrefix = layout.NLMActivePrefix

// activeKey is only called with ids layout.NLMJobKey accepted.
func activeKey(jobID string) string { k, _ := layout.NLMActiveKey(jobID); return k }

// jobDoc is a job record as stored: the record's fields and the write counter.
type jobDoc struct {
	lifecycle.Meta

	lifecycle.NLMJob
}

// activeMark is the index entry of a job in flight.
type activeMark struct {
	CreatedAt time.Time `json:"created_at"`
}

func validateRequest(r *lifecycle.NLMRequest, defaultProject string) error {
	bad := func(err error) error { return fmt.Errorf("%w: %w", lifecycle.ErrInvalidJob, err) }
	// Text first (issue 10 F), so nothing below quotes megabytes.
	if err := codes.CheckText("query", r.Query, codes.MaxDocumentBytes, codes.MultiLine); err != nil {
		return bad(err)
	}
	if err := codes.CheckText("callback", r.Callback, codes.MaxURLBytes, codes.OneLine); err != nil {
		return bad(err)
	}
	if err := codes.CheckText("context_snapshot_url", r.ContextSnapshotURL, codes.MaxURLBytes, codes.OneLine); err != nil {
		return bad(err)
	}
	for _, id := range [][2]string{{"job id", r.JobID}, {"agent slug", r.AgentSlug}} {
		if err := storekey.ValidateID(id[0], id[1]); err != nil {
			return bad(err)
		}
	}
	if r.RunID != "" {
		if err := storekey.ValidateID("run id", r.RunID); err != nil {
			return bad(err)
		}
	}
	if r.ProjectID == "" {
		r.ProjectID = defaultProject
	}
	if err := storekey.ValidateID("project id", r.ProjectID); err != nil {
		return bad(err)
	}
	if _, ok := artifact.TypeForJob(r.JobType); !ok {
		return bad(fmt.Errorf("job_type %q is not RESEARCH, BRIEF or PROPOSAL_PREPROCESS", r.JobType))
	}
	u, err := url.Parse(r.Callback)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad(fmt.Errorf("callback %q is not an http(s) URL", r.Callback))
	}
	return nil
}

// validator judges a decoded record of jobID: a state the machine knows, its
// own job id, and a request.
func validator(jobID string) func(*jobDoc) error {
	return func(d *jobDoc) error {
		switch {
		case !known(d.Status):
			return fmt.Errorf("status %q is not a state of the NLM-job machine", d.Status)
		case d.JobID != jobID:
			return fmt.Errorf("job_id %q is not the key's %q", d.JobID, jobID)
		case d.Request == nil || d.Request.JobID != jobID:
			return errors.New("no request for this job")
		}
		return nil
	}
}

func (p *Processor) record(key, jobID string) *fence.Record[jobDoc, *jobDoc] {
	return &fence.Record[jobDoc, *jobDoc]{Store: p.store, Key: key, Validate: validator(jobID),
		Lease: func(d *jobDoc) *lifecycle.Lease { return d.Lease }}
}

// Accept registers req as an NLM job in ACCEPTED (answered 202) and hands
// it to this processor's Run. A second Accept of the same job id returns
// the job as it stands, without error. Invalid requests (matching
// lifecycle.ErrInvalidJob) write nothing.
func (p *Processor) Accept(ctx context.Context, req lifecycle.NLMRequest) (lifecycle.NLMJob, error) {
	if req.Callback == "" {
		req.Callback = p.cfg.CallbackURL
	}
	if err := validateRequest(&req, p.cfg.Project); err != nil {
		return lifecycle.NLMJob{}, err
	}
	key, _ := layout.NLMJobKey(req.JobID)
	now := p.now()
	rec := p.record(key, req.JobID)
	if p.absent.Settle > 0 {
		// A store that settles may take the create-only write below over
		// an existing job (and restart it): a job found is answered as
		// it stands, unwritten.
		cur, _, err := rec.Load(ctx)
		if err == nil {
			if !terminal(cur.Status) {
				p.hand(req.JobID)
			}
			return cur.NLMJob, nil
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return lifecycle.NLMJob{}, p.poisoned(ctx, err)
		}
	}
	// The index entry first: a job without one would never be found by
	// another processor's poll; an entry without its job is removed by a
	// poll once it is older than a lease.
	mark, _ := json.Marshal(activeMark{CreatedAt: now})
	if _, err := p.store.Put(ctx, activeKey(req.JobID), mark, storage.IfNotExists()); err != nil &&
		!errors.Is(err, storage.ErrPreconditionFailed) && !errors.Is(err, storage.ErrOutcomeUnknown) {
		return lifecycle.NLMJob{}, err
	}
	d := jobDoc{NLMJob: lifecycle.NLMJob{JobID: req.JobID, Status: lifecycle.NLMAccepted, Request: &req, CreatedAt: now, UpdatedAt: now}}
	if _, err := rec.Create(ctx, d); err != nil {
		if !errors.Is(err, storage.ErrPreconditionFailed) {
			return lifecycle.NLMJob{}, err
		}
		cur, _, err := rec.Load(ctx)
		if err != nil {
			return lifecycle.NLMJob{}, p.poisoned(ctx, err)
		}
		if !terminal(cur.Status) {
			p.hand(req.JobID)
		}
		return cur.NLMJob, nil
	}
	d.Version = 1
	p.audit(ctx, &d, "")
	p.hand(req.JobID)
	return d.NLMJob, nil
}

// Get reads the NLM backend's record of a job. A poison record is
// quarantined and reported as a *lifecycle.QuarantinedError.
func (p *Processor) Get(ctx context.Context, jobID string) (lifecycle.NLMJob, error) {
	key, err := layout.NLMJobKey(jobID)
	if err != nil {
		return lifecycle.NLMJob{}, err
	}
	d, _, err := p.record(key, jobID).Load(ctx)
	return d.NLMJob, p.poisoned(ctx, err)
}

func (p *Processor) now() time.Time { return p.cfg.Clock.Now().UTC() }

// poisoned quarantines the record of a *lifecycle.QuarantinedError and returns
// err as it was; other errors pass through.
func (p *Processor) poisoned(ctx context.Context, err error) error {
	var ce *lifecycle.QuarantinedError
	if !errors.As(err, &ce) {
		return err
	}
	// The move outlives ctx (a poison record is quarantined even by a
	// stopping processor) but not StopGrace: an unreachable store must not
	// hold it.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.StopGrace)
	defer cancel()
	if _, qerr := p.quar.Move(qctx, ce); qerr != nil && !errors.Is(qerr, storage.ErrPreconditionFailed) {
		return err
	}
	if jobID, ok := layout.ParseNLMJobKey(ce.Key); ok {
		p.unmark(ctx, jobID)
	}
	return err
}

// unmark removes a job from the index of jobs in flight.
func (p *Processor) unmark(ctx context.Context, jobID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.StopGrace)
	defer cancel()
	if err := p.store.Delete(ctx, activeKey(jobID), storage.Condition{}); err != nil && !errors.Is(err, storage.ErrNotFound) {
		p.cfg.Logger.WarnContext(ctx, "nlm: index entry not removed", "job_id", jobID, "err", err)
	}
}

// audit records the write that brought d to its version, under an id that
// sorts by time and then by version, so the moves of one job read back in
// order even at equal timestamps.
func (p *Processor) audit(ctx context.Context, d *jobDoc, from lifecycle.NLMState) {
	ev := lifecycle.AuditEvent{TS: d.UpdatedAt, Event: "nlm.status.update", Actor: string(lifecycle.ActorNLMBackend),
		JobID: d.JobID, ArtifactID: d.ArtifactID, From: string(from), To: string(d.Status), Node: p.cfg.Node}
	key, err := layout.AuditKey(ev.TS, records.AuditEventID(ev.TS, "nlm/"+d.JobID, d.Version, 0))
	if err == nil {
		var b []byte
		if b, err = json.Marshal(ev); err == nil {
			_, err = p.store.Put(ctx, key, b, storage.IfNotExists())
		}
	}
	if err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		p.cfg.Logger.ErrorContext(ctx, "nlm: audit write failed", "job_id", d.JobID, "err", err)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// post delivers cb: CallbackAttempts tries with doubling waits, each one
// unit of the core under CallbackTimeout; a 2xx answer is delivery.
func (p *Processor) post(ctx context.Context, target string, cb lifecycle.NLMCallbackBody) error {
	body, err := json.Marshal(cb)
	if err != nil {
		return err
	}
	wait := p.cfg.CallbackBackoff
	for attempt := 1; ; attempt++ {
		err := hookpost.Post(ctx, p.units, "nlm "+cb.JobID+" CALLBACK", p.cfg.CallbackTimeout, p.cfg.Client, target, body)
		if err == nil {
			return nil
		}
		if attempt >= p.cfg.CallbackAttempts || ctx.Err() != nil {
			return fmt.Errorf("callback to %s failed %d times: %w", target, attempt, err)
		}
		t := p.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C():
		}
		wait *= 2
	}
}
