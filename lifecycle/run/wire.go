package run

import (
	"time"

	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/quarantine"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/storage"
)

// wire makes the Runner's components, each given what it uses (the store
// made patient, the clock, the logger, the settings it reads, and
// the components it calls), in an order where every one is made after
// those it calls. The one loop among them is cut by a hook: a poison
// status read frees what its run held, through the slots, which read
// statuses themselves.
//
// A run's way through them, one file per step of its life: submission
// (submit.go) checks a submit, claims its idempotency key when it has one,
// and the creator writes the run and hands it to the inbox (inbox.go). The
// loop (loop.go) gives it to admission (admission.go: poll, consider,
// admit, and the dedupe gate's verdict on a store that settles), whose
// claims (claim.go) take a slot and the lease (which the run's writer
// then holds and renews) and register the execution;
// the executor (exec.go) runs it, each step with its files (steps.go), and
// finish.go writes its end, through the ender as every end does. Every
// status write is a statusWriter's (writer.go), and one afterWrite follows
// it: the history index move, the audit event, metrics and a wake-up of
// every Wait. statuses.go reads and quarantines status documents and other
// poison records; history.go repairs and backfills the indexes; takeover.go
// takes up orphans and stopped submits; control.go makes the changes asked
// from outside; reads.go and reads_history.go answer the reads.
func wire(cfg *Config, cat *catalog) *Runner {
	// store is cfg.Store made patient: transient store errors are waited
	// out with backoff for as long as each call's context allows.
	store := cfg.Store.Patient(storage.Retry{Clock: cfg.Clock, Log: cfg.Logger})
	now := func() time.Time { return cfg.Clock.Now().UTC() }
	log := cfg.Logger
	// absent holds the status keys read missing on a store that settles,
	// until their absence is confirmed (evidence.Absence): a run is finished
	// as a stopped submit, or its slot taken, only then.
	absent := &evidence.Absence{Settle: cfg.Store.SettleTime()}
	tracer := tracing.New(cfg.TracerProvider)
	r := &Runner{
		cfg:    *cfg,
		store:  store,
		units:  &deadline.Units{Clock: cfg.Clock, Log: cfg.Logger},
		cat:    cat,
		poison: &poison{quar: &quarantine.Mover{Store: store, Clock: cfg.Clock, Log: cfg.Logger}, metrics: cfg.Metrics},
		life:   &lifetime{},
		inbox:  newInbox(),
	}
	chg := newChanges()
	audit := &auditLog{store: store, now: now, log: log, timeout: cfg.AuditTimeout,
		done: map[string]string{}, gaps: map[string]bool{}}
	st := &statuses{store: store, log: log, absent: absent, poison: r.poison, changes: chg}
	execs := newExecutions(r.inbox)
	hist := &history{store: store, log: log, clock: cfg.Clock, interval: cfg.IndexRepairInterval, cat: cat, statuses: st,
		life: r.life, gaps: map[string]bool{}}
	ws := &writers{store: store, now: now, log: log, metrics: cfg.Metrics, owner: cfg.Owner, lease: cfg.LeaseDuration,
		node: cfg.Node, cat: cat, audit: audit, history: hist, changes: chg}
	sl := &slots{store: store, now: now, log: log, cat: cat, statuses: st, absent: absent, poison: r.poison, execs: execs,
		inbox: r.inbox, waiting: map[string][]candidate{}, freed: map[string]storage.Version{}, held: map[string]string{}}
	st.release = sl.freeRun
	vd := newVerdicts()
	end := &ender{store: store, now: now, log: log, metrics: cfg.Metrics, slots: sl, writers: ws, verdicts: vd}
	r.reads = &reads{store: store, now: now, clock: cfg.Clock, pollInterval: cfg.PollInterval, cat: cat, statuses: st,
		poison: r.poison, changes: chg}
	xr := &executor{cfg: execConfig{Clock: cfg.Clock, Owner: cfg.Owner, RunTimeout: cfg.RunTimeout, FinishGrace: cfg.FinishGrace,
		HeartbeatInterval: cfg.HeartbeatInterval, StepTimeout: cfg.StepTimeout, StepRetries: cfg.StepRetries,
		RetryBackoff: cfg.RetryBackoff, ExternalTimeout: cfg.ExternalTimeout, Metrics: cfg.Metrics}, store: store, now: now, log: log, tracer: tracer, units: r.units, absent: absent, cat: cat,
		slots: sl, ender: end, statuses: st, execs: execs, life: r.life, readSteps: r.reads.readSteps}
	cl := &claims{now: now, log: log, owner: cfg.Owner, lease: cfg.LeaseDuration, cat: cat, slots: sl, execs: execs,
		executor: xr, unsure: map[string]*unsureClaim{}}
	gate := &dedupeGate{store: store, now: now, log: log, settle: absent.Settle, completedTTL: cfg.IdempotencyCompletedTTL,
		verdicts: vd, ender: end, statuses: st, poison: r.poison, reads: r.reads}
	cr := &creator{store: store, now: now, history: hist, statuses: st, writers: ws, inbox: r.inbox}
	r.idem = &idempotency{store: store, now: now, log: log, metrics: cfg.Metrics,
		cfg: idemConfig{Owner: cfg.Owner, IdempotencyLease: cfg.IdempotencyLease, IdempotencyCompletedTTL: cfg.IdempotencyCompletedTTL,
			IdempotencyFailedTTL: cfg.IdempotencyFailedTTL, IdempotencyMaxAttempts: cfg.IdempotencyMaxAttempts},
		absent: absent, gate: gate, creator: cr}
	r.submission = &submission{now: now, tracer: tracer, cat: cat, creator: cr, idem: r.idem}
	tk := &takeover{store: store, now: now, log: log, owner: cfg.Owner, lease: cfg.LeaseDuration, absent: absent, cat: cat,
		history: hist, writers: ws, claims: cl, ender: end, inbox: r.inbox}
	r.sched = &admission{store: store, now: now, log: log, owner: cfg.Owner, parkedPoll: cfg.ParkedPollInterval,
		queueTimeout: cfg.QueueTimeout, absent: absent, cat: cat, statuses: st, writers: ws, history: hist, audit: audit,
		gate: gate, slots: sl, claims: cl, execs: execs, takeover: tk, ender: end, inbox: r.inbox}
	r.control = &controller{now: now, store: store, cat: cat, reads: r.reads, statuses: st, writers: ws, ender: end, execs: execs, inbox: r.inbox}
	return r
}
