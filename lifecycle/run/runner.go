package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Runner is the Orchestration Layer wrapper of the seeds: the one writer of
// every run's status.json (seed 000 §2, seed 003 F4). Submit creates a run
// (requested); Run executes runs: it admits them, starts them when a slot of
// their agent is free, runs their steps with timeouts and retries, keeps a
// lease on each by heartbeat, and recovers runs whose runner was lost.
// Several Runners may share one Store: slots, leases and compare-and-swap
// writes keep each run executed by one of them at a time.
type Runner struct {
	cfg Config
	// store is cfg.Store behind core.Patient: transient store errors are
	// waited out with backoff for as long as each call's context allows.
	store   storage.Store
	patient *core.Patient
	// units runs step attempts under their deadlines and counts the
	// goroutines of attempts abandoned there (stragglers).
	units  *core.Units
	log    *slog.Logger
	audit  *storage.AuditLog
	agents map[string]*agentDef
	// flows holds the flow of every run machine by its status.json name
	// ("" is the canonical one), for runs created under another config.
	flows map[string]*flow

	// handed holds runs handed to the loop (by Submit, control calls and
	// freed slots); wake tells the loop there are some.
	handed []candidate
	wake   chan struct{}

	mu        sync.Mutex
	executing map[string]*execution // by run id
	// rehand holds runs handed over (a Deliver, an Approve) while this
	// runner was still ending their previous execution (parking them): they
	// are handed again the moment that execution ends, not at the next poll.
	rehand  map[string]candidate
	waiting map[string][]candidate
	changed chan struct{}
	// freedSlots remembers the version of each slot this runner freed, so
	// taking it again is one compare-and-swap without a read.
	freedSlots map[string]storage.Version
	// heldSlots are the slots this runner's executions hold, by key.
	heldSlots map[string]string

	// quiet holds, for the runs the last poll could only watch, until when
	// the next polls need not read them. Only the loop touches it.
	quiet map[string]time.Time

	// quar moves poison records to quarantine, logs and counts them.
	quar *core.Quarantiner

	started atomic.Bool
	wg      sync.WaitGroup
	// life is Run's context, for executions started from a bounded pass.
	life context.Context
}

type agentDef struct {
	Agent
	flow        flow
	concurrency int
}

// candidate is a run the loop should look at, with the writer that knows its
// latest document (so a run handed over by Submit needs no read).
type candidate struct {
	slug string
	w    *statusWriter
	// input is the run's input when known (handed over by Submit), so
	// executing it needs no read either.
	input      json.RawMessage
	inputKnown bool
}

// NewRunner checks cfg and the agents and returns a Runner. Nothing runs
// until Run is called.
func NewRunner(cfg Config, agents ...Agent) (*Runner, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	patient := &core.Patient{Store: cfg.Store, Clock: cfg.Clock, Log: cfg.Logger}
	r := &Runner{
		cfg:        cfg,
		store:      patient,
		patient:    patient,
		units:      &core.Units{Clock: cfg.Clock, Log: cfg.Logger},
		quar:       &core.Quarantiner{Store: patient, Clock: cfg.Clock, Log: cfg.Logger},
		log:        cfg.Logger,
		audit:      &storage.AuditLog{Store: patient, Node: cfg.Node, Now: cfg.Clock.Now},
		agents:     map[string]*agentDef{},
		flows:      map[string]*flow{},
		wake:       make(chan struct{}, 1),
		executing:  map[string]*execution{},
		rehand:     map[string]candidate{},
		waiting:    map[string][]candidate{},
		changed:    make(chan struct{}),
		freedSlots: map[string]storage.Version{},
		heldSlots:  map[string]string{},
	}
	if len(agents) == 0 {
		return nil, fmt.Errorf("%w: no agents", ErrInvalidConfig)
	}
	for _, m := range []string{"", lifecycle.MachineCanonical, lifecycle.MachineCancelable, lifecycle.MachineApproval} {
		f, _ := flowFor(m)
		r.flows[m] = &f
	}
	for _, a := range agents {
		f, err := validateAgent(a)
		if err != nil {
			return nil, err
		}
		if _, dup := r.agents[a.Slug]; dup {
			return nil, fmt.Errorf("%w: agent %s given twice", ErrInvalidConfig, a.Slug)
		}
		def := &agentDef{Agent: a, flow: f, concurrency: a.Concurrency}
		if def.concurrency <= 0 {
			def.concurrency = cfg.Concurrency
		}
		def.Steps = append([]Step(nil), a.Steps...)
		r.agents[a.Slug] = def
	}
	return r, nil
}

// Owner is the name this runner holds leases under.
func (r *Runner) Owner() string { return r.cfg.Owner }

// Agents lists the agents this runner executes, by slug, as they are in
// effect: Machine names the run machine (lifecycle.MachineCanonical when the
// agent left it empty) and Concurrency is the agent's or Config.Concurrency.
// The slices are copies; an API lists them (GET /agents) without reaching
// into the runner.
func (r *Runner) Agents() []Agent {
	out := make([]Agent, 0, len(r.agents))
	for _, def := range r.agents {
		a := def.Agent
		a.Steps = append([]Step(nil), def.Steps...)
		a.Machine = def.flow.machine
		a.Concurrency = def.concurrency
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Agent) int { return strings.Compare(a.Slug, b.Slug) })
	return out
}

func (r *Runner) now() time.Time { return r.cfg.Clock.Now().UTC() }

// Stragglers reports the goroutines of step attempts this runner abandoned
// at a deadline (step timeout, run timeout, cancel, lost lease, shutdown)
// although their step ignored its context: how many still run, and how
// many there were in all. Go cannot stop a goroutine; the Runner discards
// whatever such a step returns later, logs unit_abandoned and
// unit_returned_late, and at shutdown waits for them at most ShutdownGrace.
func (r *Runner) Stragglers() (live int, total int64) { return r.units.Stragglers() }

// Quarantined counts the poison records (undecodable or invalid run
// statuses and slot objects) this runner moved under storage's quarantine
// prefix; storage.ListQuarantine lists them and storage.Restore puts one
// back.
func (r *Runner) Quarantined() int64 { return r.quar.Count() }

// StoreRetries counts the store calls this runner retried after a
// transient failure.
func (r *Runner) StoreRetries() int64 { return r.patient.Retries() }

// flowOfDoc is the flow of the machine the run was created with (its
// status.json's machine field), which is not always the one its agent is
// configured with now.
func (r *Runner) flowOfDoc(d *Status) *flow {
	if f, ok := r.flows[d.Machine]; ok {
		return f
	}
	return r.flows[""]
}

// broadcast wakes every Wait: some run's status changed.
func (r *Runner) broadcast() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func (r *Runner) changes() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// SubmitRequest asks for a run (POST /agents/run).
type SubmitRequest struct {
	AgentSlug string
	// Trigger is TriggerManual (the default), TriggerCron or TriggerEvent.
	Trigger string
	// Input is handed to every step; it must be valid JSON when set.
	Input json.RawMessage
	// IdempotencyKey, when set, makes a repeated submit return the first
	// run (seed 004 §3). Its schemes are seed 004 §3.1's:
	// github:{delivery_id}, api:{client_id}:{request_id},
	// slack:{team_id}:{trigger_id}, scheduler:{schedule_id}:{execution_time}.
	IdempotencyKey string
	// Caller is the context of the run's creation (the initiator defaults
	// by Trigger).
	Caller
}

// SubmitResult answers a submit.
type SubmitResult struct {
	RunID string
	// Duplicate is true when an idempotency key matched an earlier submit,
	// whose run this is.
	Duplicate bool
}

// Submit creates a run in its machine's initial state (requested on the
// canonical machine), as the gateway, and hands it to this runner's loop.
// It writes nothing when the request is invalid: an *InputError for text
// over its limit (MaxNameBytes, MaxDocumentBytes for Input,
// MaxIdempotencyKeyBytes) or not clean UTF-8, a *RequestError otherwise.
func (r *Runner) Submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	if err := req.check(); err != nil {
		return SubmitResult{}, err
	}
	agent, ok := r.agents[req.AgentSlug]
	if !ok {
		return SubmitResult{}, &RequestError{Field: "agent_slug", Reason: fmt.Sprintf("unknown agent %q", req.AgentSlug)}
	}
	switch req.Trigger {
	case "":
		req.Trigger = TriggerManual
	case TriggerManual, TriggerCron, TriggerEvent:
	default:
		return SubmitResult{}, &RequestError{Field: "trigger", Reason: fmt.Sprintf("%q is not manual, cron or event", req.Trigger)}
	}
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		return SubmitResult{}, &RequestError{Field: "input", Reason: "not valid JSON"}
	}
	if req.IdempotencyKey != "" {
		return r.submitIdempotent(ctx, agent, req)
	}
	runID := newRunID(r.now())
	if err := r.createRun(ctx, agent, req, runID); err != nil {
		return SubmitResult{}, err
	}
	return SubmitResult{RunID: runID}, nil
}

// triggerInitiator is the initiator of a run's creation by its trigger.
func triggerInitiator(trigger string) lifecycle.Initiator {
	switch trigger {
	case TriggerCron:
		return lifecycle.InitiatorSystem
	case TriggerEvent:
		return lifecycle.InitiatorWebhook
	}
	return lifecycle.InitiatorUser
}

// newRunID makes an id like the seeds' run_2026-02-14_080000_abc123: it
// sorts by time, and 40 random bits make two runs of one second distinct.
func newRunID(now time.Time) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "run_" + now.UTC().Format("2006-01-02_150405") + "_" + hex.EncodeToString(b[:])
}

// createRun writes a new run: its index entry, input, status and active
// entry, in an order that leaves nothing a reader could misread if it stops
// half-way. Writing an existing run again (a retried idempotent submit) is a
// no-op for the parts already there.
func (r *Runner) createRun(ctx context.Context, agent *agentDef, req SubmitRequest, runID string) error {
	idxKey, err := runIndexKey(runID)
	if err != nil {
		return err
	}
	statusKey, err := storage.RunStatusKey(agent.Slug, runID)
	if err != nil {
		return err
	}
	active, err := activeKey(agent.Slug, runID)
	if err != nil {
		return err
	}
	entry, _ := json.Marshal(runIndexEntry{AgentSlug: agent.Slug, Machine: agent.Machine})
	if err := r.putOnce(ctx, idxKey, entry); err != nil {
		return err
	}
	if len(req.Input) > 0 {
		inKey, err := runInputKey(agent.Slug, runID)
		if err != nil {
			return err
		}
		if err := r.putOnce(ctx, inKey, req.Input); err != nil {
			return err
		}
	}
	doc := Status{
		RunID:            runID,
		AgentSlug:        agent.Slug,
		Status:           agent.flow.initial,
		Trigger:          req.Trigger,
		StartedAt:        r.now(),
		StepsTotal:       len(agent.Steps),
		ProposalsCreated: []string{},
		IdempotencyKey:   req.IdempotencyKey,
	}
	if agent.Machine != lifecycle.MachineCanonical {
		doc.Machine = agent.Machine
	}
	ver, err := storage.Create(ctx, r.store, statusKey, &doc)
	created := err == nil
	if errors.Is(err, storage.ErrPreconditionFailed) {
		doc, ver, err = r.readStatus(ctx, agent.Slug, runID, statusKey)
	}
	if err != nil {
		return err
	}
	// The creation is recorded before the active entry makes the run
	// visible to polls, so its audit, metric and log come before any move
	// a runner makes on it.
	if created {
		b := req.Caller.by(lifecycle.ActorGateway, triggerInitiator(req.Trigger))
		b.tc.RunID, b.tc.Timestamp = runID, doc.StartedAt
		r.recordAudit(ctx, storage.AuditEvent{Event: "run.status.update", Actor: string(b.actor), RunID: runID, To: doc.Status}, &b.tc)
		r.cfg.Metrics.RunTransition(agent.flow.machine, "", doc.Status)
		r.cfg.Metrics.RunActive(doc.Status, 1)
		attrs := []slog.Attr{slog.String("runId", runID), slog.String("type", agent.Slug),
			slog.String("idempotencyKey", req.IdempotencyKey), slog.String("initiator", string(b.tc.Initiator))}
		r.log.LogAttrs(ctx, slog.LevelInfo, "run_created", append(attrs, contextAttrs(&b.tc)...)...)
		r.broadcast()
	}
	if err := r.putOnce(ctx, active, []byte("{}")); err != nil {
		return err
	}
	w := r.newWriter(agent.Slug, runID, statusKey, &doc, ver)
	r.hand(candidate{slug: agent.Slug, w: w, input: req.Input, inputKnown: true})
	return nil
}

// hand gives the loop a run to consider, without blocking.
func (r *Runner) hand(c candidate) {
	r.mu.Lock()
	r.handed = append(r.handed, c)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// hasHanded tells whether runs wait in the queue of handed runs.
func (r *Runner) hasHanded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.handed) > 0
}

// takeHanded empties the queue of handed runs.
func (r *Runner) takeHanded() []candidate {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.handed
	r.handed = nil
	return h
}

// putOnce writes value at key create-only; an existing key is left as is.
func (r *Runner) putOnce(ctx context.Context, key string, value []byte) error {
	_, err := r.store.Put(ctx, key, value, storage.IfNotExists())
	if errors.Is(err, storage.ErrPreconditionFailed) {
		return nil
	}
	return err
}

// locate finds a run's agent through the run index.
func (r *Runner) locate(ctx context.Context, runID string) (slug, statusKey string, err error) {
	idx, err := runIndexKey(runID)
	if err != nil {
		return "", "", &RequestError{Field: "run_id", Reason: err.Error()}
	}
	b, v, err := r.store.Get(ctx, idx)
	if errors.Is(err, storage.ErrNotFound) {
		return "", "", fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	if err != nil {
		return "", "", err
	}
	var e runIndexEntry
	derr := json.Unmarshal(b, &e)
	if derr == nil {
		if statusKey, err = storage.RunStatusKey(e.AgentSlug, runID); err == nil {
			return e.AgentSlug, statusKey, nil
		}
		derr = err
	}
	// A poison index entry: quarantine it, and find the run among this
	// runner's agents, whose run folders hold its status.json.
	if _, err := r.quarantine(ctx, &storage.CorruptError{Key: idx, Version: v, Data: b, Reason: "invalid run index entry", Err: derr}); err != nil {
		return "", "", err
	}
	return r.reindex(ctx, runID, idx)
}

// reindex finds runID's agent among this runner's agents and writes its
// index entry again (create-only: a concurrent repair wins).
func (r *Runner) reindex(ctx context.Context, runID, idx string) (slug, statusKey string, err error) {
	slugs := make([]string, 0, len(r.agents))
	for s := range r.agents {
		slugs = append(slugs, s)
	}
	slices.Sort(slugs)
	for _, s := range slugs {
		key, err := storage.RunStatusKey(s, runID)
		if err != nil {
			return "", "", err
		}
		if _, _, err := r.store.Get(ctx, key); errors.Is(err, storage.ErrNotFound) {
			continue
		} else if err != nil {
			return "", "", err
		}
		entry, _ := json.Marshal(runIndexEntry{AgentSlug: s, Machine: r.agents[s].Machine})
		if _, err := r.store.Put(ctx, idx, entry, storage.IfNotExists()); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
			return "", "", err
		}
		return s, key, nil
	}
	return "", "", fmt.Errorf("%w: %s (its index entry was poison)", ErrNotFound, runID)
}

// Status reads a run's status.json (GET /runs/{runId}/status).
//
// A status.json that cannot be decoded or fails validation (a status its
// machine does not know, a run_id or agent_slug that is not its key's) is
// quarantined, and Status, like Wait, returns a *QuarantinedError.
func (r *Runner) Status(ctx context.Context, runID string) (Status, error) {
	slug, key, err := r.locate(ctx, runID)
	if err != nil {
		return Status{}, err
	}
	doc, _, err := r.readStatus(ctx, slug, runID, key)
	if errors.Is(err, storage.ErrNotFound) {
		return Status{}, fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	return doc, err
}

// Steps reads a run's step files in step order (GET /runs/{runId}/steps).
func (r *Runner) Steps(ctx context.Context, runID string) ([]StepRecord, error) {
	slug, _, err := r.locate(ctx, runID)
	if err != nil {
		return nil, err
	}
	return r.readSteps(ctx, slug, runID)
}

func (r *Runner) readSteps(ctx context.Context, slug, runID string) ([]StepRecord, error) {
	prefix, err := storage.RunStepsPrefix(slug, runID)
	if err != nil {
		return nil, err
	}
	var out []StepRecord
	for key, err := range r.store.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		b, _, err := r.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var s StepRecord
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("run: step file %s: %w", key, err)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StepNumber < out[j].StepNumber })
	return out, nil
}

// Runs reads the status of every run of an agent, oldest first
// (GET /runs?agent={slug}).
func (r *Runner) Runs(ctx context.Context, slug string) ([]Status, error) {
	prefix, err := storage.AgentRunsPrefix(slug)
	if err != nil {
		return nil, &RequestError{Field: "agent", Reason: err.Error()}
	}
	var out []Status
	for key, err := range r.store.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		runID, ok := strings.CutSuffix(strings.TrimPrefix(key, prefix), "/status.json")
		if !ok || strings.Contains(runID, "/") {
			continue
		}
		doc, _, err := r.readStatus(ctx, slug, runID, key)
		if errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrCorrupt) {
			continue // gone, or poison: quarantined
		}
		if err != nil {
			return nil, err
		}
		out = append(out, doc)
	}
	return out, nil
}

// Wait returns the run's status once it is terminal or parked (waiting for
// an approval or an external event), or ctx's error. It re-reads when this
// runner writes any status and at every PollInterval.
func (r *Runner) Wait(ctx context.Context, runID string) (Status, error) {
	for {
		changed := r.changes()
		doc, err := r.Status(ctx, runID)
		if err != nil {
			return doc, err
		}
		f := r.flowOfDoc(&doc)
		if f.terminal(doc.Status) || (doc.Lease == nil && slices.Contains(f.parked, doc.Status)) {
			return doc, nil
		}
		t := r.cfg.Clock.NewTimer(r.cfg.PollInterval)
		select {
		case <-changed:
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return doc, ctx.Err()
		}
		t.Stop()
	}
}
