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
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
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

	// auditDone holds, by run, the id of the last audit event this runner
	// knows is in the log; auditGaps the runs whose last event could not
	// be written (writer.go).
	auditMu   sync.Mutex
	auditDone map[string]string
	auditGaps map[string]bool

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
		agents:     map[string]*agentDef{},
		flows:      map[string]*flow{},
		wake:       make(chan struct{}, 1),
		executing:  map[string]*execution{},
		rehand:     map[string]candidate{},
		waiting:    map[string][]candidate{},
		changed:    make(chan struct{}),
		freedSlots: map[string]storage.Version{},
		heldSlots:  map[string]string{},
		auditDone:  map[string]string{},
		auditGaps:  map[string]bool{},
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
// prefix; records.ListQuarantine lists them and records.Restore puts one
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

// SubmitRequest asks for a run (POST /agents/run); SubmitResult answers
// it. Both live in lifecycle so the Go client can send them without the
// engine.
type (
	SubmitRequest = lifecycle.SubmitRequest
	SubmitResult  = lifecycle.SubmitResult
)

// Submit creates a run in its machine's initial state (requested on the
// canonical machine), as the gateway, and hands it to this runner's loop.
// It writes nothing when the request is invalid: an *InputError for text
// over its limit (MaxNameBytes, MaxDocumentBytes for Input,
// MaxIdempotencyKeyBytes) or not clean UTF-8, a *RequestError otherwise.
func (r *Runner) Submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	if err := checkSubmit(&req); err != nil {
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

// createRun writes a new run: its active entry, index entry, input, status
// and audit event, in an order that leaves every run findable whatever
// write a crash stops at. The active entry comes first and carries the
// run's first status.json (activeEntry): from it, a poll finishes a submit
// that stopped before its status was written (finishSubmit), so no run is
// left half-made, and a run with a status always has the active entry that
// recovery looks through. Writing an existing run again (a retried
// idempotent submit) is a no-op for the parts already there.
func (r *Runner) createRun(ctx context.Context, agent *agentDef, req SubmitRequest, runID string) error {
	idxKey, err := layout.RunIndexKey(runID)
	if err != nil {
		return err
	}
	statusKey, err := layout.RunStatusKey(agent.Slug, runID)
	if err != nil {
		return err
	}
	active, err := layout.RunActiveKey(agent.Slug, runID)
	if err != nil {
		return err
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
	b := callerBy(&req.Caller, lifecycle.ActorGateway, triggerInitiator(req.Trigger))
	b.tc.RunID, b.tc.Timestamp = runID, doc.StartedAt
	doc.LastAudit = r.auditOf(&doc, "", b, 1)
	pending, err := json.Marshal(activeEntry{Pending: &doc, Input: len(req.Input) > 0, Actor: b.actor, Context: &b.tc})
	if err != nil {
		return err
	}
	if err := r.putOnce(ctx, active, pending); err != nil {
		return err
	}
	entry, _ := json.Marshal(runIndexEntry{AgentSlug: agent.Slug, Machine: agent.Machine})
	if err := r.putOnce(ctx, idxKey, entry); err != nil {
		return err
	}
	if len(req.Input) > 0 {
		inKey, err := layout.RunInputKey(agent.Slug, runID)
		if err != nil {
			return err
		}
		if err := r.putOnce(ctx, inKey, req.Input); err != nil {
			return err
		}
	}
	ver, err := records.Create(ctx, r.store, statusKey, &doc)
	created := err == nil
	if errors.Is(err, storage.ErrPreconditionFailed) {
		doc, ver, err = r.readStatus(ctx, agent.Slug, runID, statusKey)
	}
	if err != nil {
		return err
	}
	if created {
		r.recordCreated(ctx, agent, &doc, b, "run_created")
	}
	w := r.newWriter(agent.Slug, runID, statusKey, &doc, ver)
	r.hand(candidate{slug: agent.Slug, w: w, input: req.Input, inputKnown: true})
	return nil
}

// activeEntry is the body of a run's active index entry: the run's first
// status.json and what its submit knew, so that a poll can finish the
// submit if it stopped before writing the status (finishSubmit).
type activeEntry struct {
	Pending *Status                      `json:"pending,omitempty"`
	Input   bool                         `json:"input,omitempty"` // the run has an input.json
	Actor   lifecycle.Actor              `json:"actor,omitempty"`
	Context *lifecycle.TransitionContext `json:"context,omitempty"`
}

// recordCreated records a run's creation: its audit event, metrics and log
// line (msg), and wakes every Wait.
func (r *Runner) recordCreated(ctx context.Context, agent *agentDef, doc *Status, b by, msg string) {
	r.writeAudit(ctx, doc)
	r.cfg.Metrics.RunTransition(agent.flow.machine, "", doc.Status)
	attrs := []slog.Attr{slog.String("runId", doc.RunID), slog.String("type", agent.Slug),
		slog.String("idempotencyKey", doc.IdempotencyKey), slog.String("initiator", string(b.tc.Initiator))}
	level := slog.LevelInfo
	if msg != "run_created" {
		level = slog.LevelWarn
	}
	r.log.LogAttrs(ctx, level, msg, append(attrs, contextAttrs(&b.tc)...)...)
	r.broadcast()
}

// finishSubmit finishes the submit of a run whose active entry exists but
// whose status.json does not, once the submit had a lease's time to write
// it (a submit that takes longer loses nothing: its status write is
// create-only and finds this one). The run is created as its submit would
// have created it, and goes on; when its input.json never landed it ends
// failed at once, since no step may run without its input. Nothing is done
// for an entry written before active entries carried the pending status.
func (r *Runner) finishSubmit(ctx context.Context, slug, runID, statusKey string) {
	agent, ok := r.agents[slug]
	if !ok {
		return
	}
	active, err := layout.RunActiveKey(slug, runID)
	if err != nil {
		return
	}
	raw, _, err := r.store.Get(ctx, active)
	if err != nil {
		return
	}
	var e activeEntry
	if json.Unmarshal(raw, &e) != nil || e.Pending == nil || e.Pending.RunID != runID || e.Pending.AgentSlug != slug {
		return
	}
	if !r.now().After(e.Pending.StartedAt.Add(r.cfg.LeaseDuration)) {
		return // its submit may still be writing
	}
	doc := *e.Pending
	if err := r.statusValidator(slug, runID)(&doc); err != nil {
		return
	}
	idxKey, err := layout.RunIndexKey(runID)
	if err != nil {
		return
	}
	entry, _ := json.Marshal(runIndexEntry{AgentSlug: slug, Machine: doc.Machine})
	if r.putOnce(ctx, idxKey, entry) != nil {
		return
	}
	inputLost := false
	if e.Input {
		inKey, err := layout.RunInputKey(slug, runID)
		if err != nil {
			return
		}
		_, _, err = r.store.Get(ctx, inKey)
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return
		}
		inputLost = err != nil
	}
	ver, err := records.Create(ctx, r.store, statusKey, &doc)
	if err != nil {
		return // written meanwhile (its submit, another runner): the next poll reads it
	}
	b := by{actor: e.Actor, tc: lifecycle.TransitionContext{}}
	if e.Context != nil {
		b.tc = *e.Context
	}
	if b.actor == "" {
		b.actor = lifecycle.ActorGateway
	}
	r.recordCreated(ctx, agent, &doc, b, "run_submit_finished")
	w := r.newWriter(slug, runID, statusKey, &doc, ver)
	if !inputLost {
		r.hand(candidate{slug: slug, w: w})
		return
	}
	f := r.flowOfDoc(&doc)
	err = w.apply(ctx, bySystem(), func(ctx context.Context, d *Status) error {
		ev := f.fail
		if _, ok := f.target(d.Status, ev); !ok {
			ev = f.cancel
		}
		if err := f.fire(ctx, d, ev, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		r.finishFields(d, lifecycle.NewRunError(codes.InternalError, "its submit stopped before its input was written"))
		return nil
	})
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "run_not_advanced", slog.String("runId", runID), slog.String("error", err.Error()))
		return
	}
	r.cleanup(ctx, slug, runID, "", "")
	r.finished(ctx, w.snapshot())
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
	idx, err := layout.RunIndexKey(runID)
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
		if statusKey, err = layout.RunStatusKey(e.AgentSlug, runID); err == nil {
			return e.AgentSlug, statusKey, nil
		}
		derr = err
	}
	// A poison index entry: quarantine it, and find the run among this
	// runner's agents, whose run folders hold its status.json.
	if _, err := r.quarantine(ctx, &records.CorruptError{Key: idx, Version: v, Data: b, Reason: "invalid run index entry", Err: derr}); err != nil {
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
		key, err := layout.RunStatusKey(s, runID)
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
	prefix, err := layout.RunStepsPrefix(slug, runID)
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
	prefix, err := layout.AgentRunsPrefix(slug)
	if err != nil {
		return nil, &RequestError{Field: "agent", Reason: err.Error()}
	}
	var out []Status
	for key, err := range r.store.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		_, runID, ok := layout.ParseRunStatusKey(key)
		if !ok {
			continue
		}
		doc, _, err := r.readStatus(ctx, slug, runID, key)
		if errors.Is(err, storage.ErrNotFound) || errors.Is(err, records.ErrCorrupt) {
			continue // gone, or poison: quarantined
		}
		if err != nil {
			return nil, err
		}
		out = append(out, doc)
	}
	return out, nil
}

// ActiveRuns counts the runs not yet terminal by status, as the store holds
// them: it lists the active index and reads each run's status.json (a read
// per active run, so call it at a scrape, not per request). Every state
// that is not terminal of the machines of this runner's agents is in the
// map, 0 when no run is in it. It is what gwi_run_active_gauge exports
// (adapters/prometheus WatchRuns): read from the store, the count is right
// after a restart and with several runners sharing the store, where counts
// moved by one process's writes are not.
func (r *Runner) ActiveRuns(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	for _, a := range r.agents {
		f, _ := flowFor(a.Machine)
		for _, s := range f.states {
			if !f.terminal(s) {
				out[s] = 0
			}
		}
	}
	for key, err := range r.store.List(ctx, layout.RunActivePrefix) {
		if err != nil {
			return nil, err
		}
		slug, runID, ok := layout.ParseRunActiveKey(key)
		if !ok {
			continue
		}
		statusKey, err := layout.RunStatusKey(slug, runID)
		if err != nil {
			continue
		}
		doc, _, err := r.readStatus(ctx, slug, runID, statusKey)
		if errors.Is(err, storage.ErrNotFound) || errors.Is(err, records.ErrCorrupt) {
			continue // its submit is not done, or poison (quarantined)
		}
		if err != nil {
			return nil, err
		}
		if !r.flowOfDoc(&doc).terminal(doc.Status) {
			out[doc.Status]++
		}
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
