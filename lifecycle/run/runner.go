package run

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/tracing"
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
	cfg Config
	// store is cfg.Store made patient (storage.Store.Patient): transient
	// store errors are waited out with backoff for as long as each call's
	// context allows.
	store *storage.Store
	// units runs step attempts under their deadlines and counts the
	// goroutines of attempts abandoned there (stragglers).
	units  *core.Units
	log    *slog.Logger
	tracer tracing.Tracer
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

	// unsure holds the claims whose write may have landed although they
	// failed, by run id (see unsureClaim). Only the loop touches it.
	unsure map[string]*unsureClaim
	// quiet holds, for the runs the last poll could only watch, until when
	// the next polls need not read them. Only the loop touches it.
	quiet map[string]time.Time
	// repairedAt is when the loop last ran the index repair pass, and
	// backfillStarted whether it started the backfill. Only the loop
	// touches them.
	repairedAt      time.Time
	backfillStarted bool
	// listed holds the runs the last poll listed, so a poll tells new work
	// from runs it saw before. Only the loop touches it.
	listed map[string]bool
	// absent holds the status keys read missing on a store that settles,
	// until their absence is confirmed (core.Absence): a run is finished
	// as a stopped submit, or its slot taken, only then.
	absent core.Absence

	// auditDone holds, by run, the id of the last audit event this runner
	// knows is in the log; auditGaps the runs whose last event could not
	// be written (writer.go); indexGaps the runs whose status index entry
	// could not be moved (history.go). A gap keeps the run's active entry,
	// so the poll finds the run and repairs it.
	auditMu   sync.Mutex
	auditDone map[string]string
	auditGaps map[string]bool
	indexGaps map[string]bool

	// dedupeOK holds the runs with an idempotency key found to be their
	// key's one run (idemsettle.go), on a store that settles; under mu.
	dedupeOK map[string]bool

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
	store := cfg.Store.Patient(storage.Retry{Clock: cfg.Clock, Log: cfg.Logger})
	r := &Runner{
		cfg:        cfg,
		store:      store,
		units:      &core.Units{Clock: cfg.Clock, Log: cfg.Logger},
		quar:       &core.Quarantiner{Store: store, Clock: cfg.Clock, Log: cfg.Logger},
		absent:     core.Absence{Settle: storage.SettleTime(cfg.Store)},
		log:        cfg.Logger,
		tracer:     tracing.New(cfg.TracerProvider),
		agents:     map[string]*agentDef{},
		flows:      map[string]*flow{},
		wake:       make(chan struct{}, 1),
		executing:  map[string]*execution{},
		rehand:     map[string]candidate{},
		waiting:    map[string][]candidate{},
		changed:    make(chan struct{}),
		freedSlots: map[string]storage.Version{},
		heldSlots:  map[string]string{},
		unsure:     map[string]*unsureClaim{},
		auditDone:  map[string]string{},
		auditGaps:  map[string]bool{},
		indexGaps:  map[string]bool{},
		dedupeOK:   map[string]bool{},
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
func (r *Runner) StoreRetries() int64 { return r.store.Retries() }

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
