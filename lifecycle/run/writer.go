package run

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// writers make the status writers of runs and record what each write did:
// its audit event, the move of its status index entry, metrics, the
// run_transition log line, and a wake-up of every Wait.
type writers struct {
	store   *storage.Store
	now     func() time.Time
	log     *slog.Logger
	metrics Metrics
	owner   string        // Config.Owner: the lease a writer holds
	lease   time.Duration // Config.LeaseDuration
	node    string        // Config.Node: where the audit events say they were written
	cat     *catalog
	audit   *auditLog
	history *history
	changes *changes
}

// statusWriter writes one run's status.json through core.Record, the one
// fenced read-check-write of the SDK: it keeps the document and store
// version of its last write, so on the happy path it writes with IfMatch and
// never reads; a change the cached document refuses is judged again on a
// fresh read; and once the writer holds the run's lease (after claim) every
// write checks, inside the conditional write, that the lease is still its
// own, and renews it.
type statusWriter struct {
	ws    *writers
	runID string // fixed for the writer's life; read without the lock
	slug  string
	key   string

	mu  sync.Mutex
	rec *core.Record[Status, *Status]
	// epoch is the lease epoch this writer holds (0: none); leaseUntil is
	// the lease expiry of its last write, renewedAt when that write was made.
	epoch      int64
	leaseUntil time.Time
	renewedAt  time.Time
}

// newWriter returns the writer of a run's status at key; doc and ver fill
// its cache when known (ver == "": read on first use).
func (ws *writers) newWriter(slug, runID, key string, doc *Status, ver storage.Version) *statusWriter {
	w := &statusWriter{ws: ws, runID: runID, slug: slug, key: key}
	w.rec = ws.statusRecord(slug, runID, key, "", 0)
	if ver != "" {
		w.rec.Seed(*doc, ver)
	}
	return w
}

// statusRecord is the core.Record of one run's status.json, fenced by
// (owner, epoch) when epoch > 0.
func (ws *writers) statusRecord(slug, runID, key, owner string, epoch int64) *core.Record[Status, *Status] {
	return &core.Record[Status, *Status]{
		Store: ws.store, Key: key, Owner: owner, Epoch: epoch,
		Lease:    func(d *Status) *lifecycle.Lease { return d.Lease },
		Clone:    func(d *Status) Status { return cloneStatus(d) },
		Validate: statusValidator(slug, runID),
	}
}

func (w *statusWriter) record() *core.Record[Status, *Status] {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rec
}

// apply runs change on a copy of the document and writes the result, as
// b's actor and with b's transition context (its run id and timestamp
// filled in here): change gets a ctx that carries the context, so a move
// its machine refuses reports it. change may run more than once (after a
// conflict) and must touch only its argument. A write of the lease holder
// renews the lease.
func (w *statusWriter) apply(ctx context.Context, b by, change func(ctx context.Context, d *Status) error) error {
	b.tc.RunID = w.runID
	if b.tc.Timestamp.IsZero() {
		b.tc.Timestamp = w.ws.now()
	}
	fctx := machine.WithTransition(ctx, b.tc)
	w.mu.Lock()
	rec, epoch := w.rec, w.epoch
	w.mu.Unlock()
	var renewed time.Time
	before, after, err := rec.Apply(ctx, func(d *Status) error {
		// The audit event of the write this one replaces must be in the
		// log before its record in the document is replaced.
		if err := w.ws.audit.ensure(ctx, d); err != nil {
			return err
		}
		from := d.Status
		if err := change(fctx, d); err != nil {
			return err
		}
		d.RunnerLostAt = nil // a read's verdict, never stored
		defer func() { d.LastAudit = w.ws.auditRecord(d, from, b, d.Version+1) }()
		if epoch > 0 && d.Lease != nil { // a terminal or parking write drops the lease
			now := w.ws.now()
			d.Lease.ExpiresAt, d.LastHeartbeatAt = now.Add(w.ws.lease), &now
			renewed = now
		} else {
			renewed = time.Time{}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !renewed.IsZero() {
		w.mu.Lock()
		if w.rec == rec {
			w.leaseUntil, w.renewedAt = after.Lease.ExpiresAt, renewed
		}
		w.mu.Unlock()
	}
	w.ws.history.moveStatusIndex(ctx, &after, before.Status)
	w.ws.afterWrite(ctx, &after, before.Status, b)
	return nil
}

// hold makes the writer the lease holder at epoch, with the document just
// written by its claim: from now on every write is fenced.
func (w *statusWriter) hold(epoch int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	doc, ver := w.rec.Snapshot()
	rec := w.ws.statusRecord(w.slug, w.runID, w.key, w.ws.owner, epoch)
	rec.Seed(doc, ver)
	w.rec, w.epoch = rec, epoch
	w.leaseUntil, w.renewedAt = doc.Lease.ExpiresAt, *doc.LastHeartbeatAt
}

// snapshot returns a copy of the last document written or read.
func (w *statusWriter) snapshot() Status {
	doc, _ := w.record().Snapshot()
	return doc
}

// renewed is when this writer last renewed its lease.
func (w *statusWriter) renewed() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.renewedAt
}

// leaseValid tells, without I/O, whether this writer's lease is certainly
// still its own: the expiry it last wrote, less a tenth for safety, is
// ahead. No other runner takes a run over before the lease expires.
func (w *statusWriter) leaseValid() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return core.LeaseCertain(w.leaseUntil, w.ws.now(), w.ws.lease)
}

// confirmLease makes sure the lease is this writer's at this instant: by
// time while leaseValid vouches for it, else by a fenced read. Side writes
// call it after observing the object they replace (see writeOutput), so
// that no newer owner can have written that object in between.
func (w *statusWriter) confirmLease(ctx context.Context) error {
	if w.leaseValid() {
		return nil
	}
	return w.record().Confirm(ctx)
}

// by is who makes a status write (the actor the machine checks) and the
// write's transition context (docs/spec.md#transition-context).
type by struct {
	actor lifecycle.Actor
	tc    lifecycle.TransitionContext
}

// bySystem is a write the orchestration layer makes on its own.
func bySystem() by {
	return by{actor: lifecycle.ActorOrchestration, tc: lifecycle.TransitionContext{Initiator: lifecycle.InitiatorSystem}}
}

// byTimeout is a write the orchestration layer makes because a deadline
// passed.
func byTimeout() by {
	return by{actor: lifecycle.ActorOrchestration, tc: lifecycle.TransitionContext{Initiator: lifecycle.InitiatorTimeout}}
}

// afterWrite records what a status write did: its audit event and log
// line (auditLog.record), the run metrics (docs/spec.md#metrics), and a
// wake-up of every Wait. A context that is about an approval or an
// external event gets its details from the document just written.
func (ws *writers) afterWrite(ctx context.Context, doc *Status, from string, b by) {
	ws.audit.record(ctx, doc, from, b.actor, writeContext(doc, b))
	ws.metrics.RunTransition(ws.cat.flowOfDoc(doc).machine, from, doc.Status)
	ws.changes.broadcast()
}

// auditRecord is the audit event (docs/spec.md#audit-event) of the write that
// makes doc, from the status from, as b, at version seq of the document: the
// writer puts it in the document, and the audit log writes it to the log.
func (ws *writers) auditRecord(doc *Status, from string, b by, seq int64) *AuditRecord {
	tc := writeContext(doc, b)
	ev := lifecycle.AuditEvent{TS: ws.now(), Event: "run.status.update", Actor: string(b.actor), RunID: doc.RunID,
		From: from, To: doc.Status, Node: ws.node}
	ev.Context, _ = json.Marshal(&tc) // strings, times and maps of strings: it cannot fail
	return &AuditRecord{ID: records.AuditEventID(ev.TS, doc.RunID, seq, 0), Event: ev}
}

// writeContext is the transition context of a write as b, with the
// approval or external-event details of the document written.
func writeContext(doc *Status, b by) lifecycle.TransitionContext {
	tc := b.tc
	if tc.Approval != nil && doc.Approval != nil {
		a := *doc.Approval
		tc.Approval = &a
	}
	if tc.External != nil && doc.External != nil {
		e := *doc.External
		tc.External = &e
	}
	return tc
}

// changes tells every Wait that some run's status changed: a status write
// closes the channel the waiters hold and makes a new one.
type changes struct {
	mu sync.Mutex
	ch chan struct{}
}

func newChanges() *changes { return &changes{ch: make(chan struct{})} }

// broadcast wakes every Wait: some run's status changed.
func (c *changes) broadcast() {
	c.mu.Lock()
	close(c.ch)
	c.ch = make(chan struct{})
	c.mu.Unlock()
}

// next is closed at the next broadcast.
func (c *changes) next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch
}

func cloneStatus(d *Status) Status {
	c := *d
	c.ProposalsCreated = slices.Clone(d.ProposalsCreated)
	if c.ProposalsCreated == nil {
		c.ProposalsCreated = []string{}
	}
	c.FinishedAt = clonePtr(d.FinishedAt)
	c.Error = clonePtr(d.Error)
	c.Lease = clonePtr(d.Lease)
	c.LastHeartbeatAt = clonePtr(d.LastHeartbeatAt)
	c.CancelRequestedAt = clonePtr(d.CancelRequestedAt)
	c.TakenOverAt = clonePtr(d.TakenOverAt)
	c.RunnerLostAt = clonePtr(d.RunnerLostAt)
	c.LastAudit = clonePtr(d.LastAudit)
	if d.Approval != nil {
		a := *d.Approval
		a.DecidedAt = clonePtr(d.Approval.DecidedAt)
		c.Approval = &a
	}
	if d.External != nil {
		e := *d.External
		e.Deadline = clonePtr(d.External.Deadline)
		e.ReceivedAt = clonePtr(d.External.ReceivedAt)
		c.External = &e
	}
	return c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
