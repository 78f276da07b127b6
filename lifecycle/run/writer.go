package run

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/audit"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
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

// statusWriter writes one run's status.json through fence.Record, the one
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
	rec *fence.Record[lifecycle.RunStatus, *lifecycle.RunStatus]
	// epoch is the lease epoch this writer holds (0: none); leaseUntil is
	// the lease expiry of its last write, renewedAt when that write was made.
	epoch      int64
	leaseUntil time.Time
	renewedAt  time.Time
}

// newWriter returns the writer of a run's status at key; doc and ver fill
// its cache when known (ver == "": read on first use).
func (ws *writers) newWriter(slug, runID, key string, doc *lifecycle.RunStatus, ver storage.Version) *statusWriter {
	w := &statusWriter{ws: ws, runID: runID, slug: slug, key: key}
	w.rec = ws.statusRecord(slug, runID, key, "", 0)
	if ver != "" {
		w.rec.Seed(*doc, ver)
	}
	return w
}

// statusRecord is the fence.Record of one run's status.json, fenced by
// (owner, epoch) when epoch > 0.
func (ws *writers) statusRecord(slug, runID, key, owner string, epoch int64) *fence.Record[lifecycle.RunStatus, *lifecycle.RunStatus] {
	return &fence.Record[lifecycle.RunStatus, *lifecycle.RunStatus]{
		Store: ws.store, Key: key, Owner: owner, Epoch: epoch,
		Lease:    func(d *lifecycle.RunStatus) *lifecycle.Lease { return d.Lease },
		Clone:    func(d *lifecycle.RunStatus) lifecycle.RunStatus { return cloneStatus(d) },
		Validate: statusValidator(slug, runID),
	}
}

func (w *statusWriter) record() *fence.Record[lifecycle.RunStatus, *lifecycle.RunStatus] {
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
func (w *statusWriter) apply(ctx context.Context, b by, change func(ctx context.Context, d *lifecycle.RunStatus) error) error {
	b.tc.RunID = w.runID
	if b.tc.Timestamp.IsZero() {
		b.tc.Timestamp = w.ws.now()
	}
	fctx := machine.WithTransition(ctx, b.tc)
	w.mu.Lock()
	rec, epoch := w.rec, w.epoch
	w.mu.Unlock()
	var renewed time.Time
	before, after, err := rec.Apply(ctx, func(d *lifecycle.RunStatus) error {
		// The audit event of the write this one replaces must be in the
		// log before its record in the document is replaced.
		if err := w.ws.audit.ensure(ctx, d); err != nil {
			return err
		}
		from := d.Status
		if err := change(fctx, d); err != nil {
			return err
		}
		d.RunnerLostAt, d.QueuePosition = nil, 0 // a read's verdicts, never stored
		updated := w.ws.now()
		// A document of an older release (no schema_version) is of
		// version 1; it says so once this release writes it.
		d.UpdatedAt, d.SchemaVersion = &updated, max(d.SchemaVersion, runStatusSchema)
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
	w.ws.afterWrite(ctx, &after, before.Status, b)
	return nil
}

// snapshot returns a copy of the last document written or read.
func (w *statusWriter) snapshot() lifecycle.RunStatus {
	doc, _ := w.record().Snapshot()
	return doc
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

// afterWrite does what follows every status write, in one call: the move
// of the run's status index entry (history.moveStatusIndex), its audit
// event and log line (auditLog.record), the run metrics
// (docs/spec.md#metrics), and a wake-up of every Wait. A context that is
// about an approval or an external event gets its details from the
// document just written.
func (ws *writers) afterWrite(ctx context.Context, doc *lifecycle.RunStatus, from string, b by) {
	ws.history.moveStatusIndex(ctx, doc, from)
	ws.audit.record(ctx, doc, from, b.actor, writeContext(doc, b))
	runTransition(ws.metrics, doc.TenantID, doc.AgentSlug, ws.cat.flowOfDoc(doc).machine, from, doc.Status)
	ws.changes.broadcast()
}

// settled tells whether everything that followed a run's writes is done:
// its last audit event is in the log and its status index entry moved.
// Then it forgets the run's audit state: the run ended.
func (ws *writers) settled(runID string) bool {
	if ws.audit.gap(runID) || ws.history.gap(runID) {
		return false
	}
	ws.audit.forget(runID)
	return true
}

// auditRecord is the audit event (docs/spec.md#audit-event) of the write that
// makes doc, from the status from, as b, at version seq of the document: the
// writer puts it in the document, and the audit log writes it to the log.
func (ws *writers) auditRecord(doc *lifecycle.RunStatus, from string, b by, seq int64) *lifecycle.RunAuditRecord {
	tc := writeContext(doc, b)
	ev := lifecycle.AuditEvent{TS: ws.now(), Event: "run.status.update", Actor: string(b.actor), RunID: doc.RunID,
		TenantID: doc.TenantID, From: from, To: doc.Status, Node: ws.node}
	ev.Context, _ = json.Marshal(&tc) // strings, times and maps of strings: it cannot fail
	return &lifecycle.RunAuditRecord{ID: records.AuditEventID(ev.TS, doc.RunID, seq, 0), Event: ev}
}

// writeContext is the transition context of a write as b, with the
// approval or external-event details of the document written.
func writeContext(doc *lifecycle.RunStatus, b by) lifecycle.TransitionContext {
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

func cloneStatus(d *lifecycle.RunStatus) lifecycle.RunStatus {
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

// by is the write a control call makes as actor, with the caller's
// context (initiator def unless the caller names one).
func callerBy(c *lifecycle.Caller, actor lifecycle.Actor, def lifecycle.Initiator) by {
	tc := lifecycle.TransitionContext{UserID: c.UserID, Initiator: c.Initiator, Metadata: c.Metadata}
	if tc.Initiator == "" {
		tc.Initiator = def
	}
	return by{actor: actor, tc: tc}
}

// triggerInitiator is the initiator of a run's creation by its trigger.
func triggerInitiator(trigger string) lifecycle.Initiator {
	switch trigger {
	case triggerCron:
		return lifecycle.InitiatorSystem
	case triggerEvent:
		return lifecycle.InitiatorWebhook
	}
	return lifecycle.InitiatorUser
}

// afterCreate does what follows the first status write of a run, as
// afterWrite does for the others: its audit event, metrics and log line
// (msg), and a wake-up of every Wait.
func (ws *writers) afterCreate(ctx context.Context, agent *agentDef, doc *lifecycle.RunStatus, b by, msg string) {
	ws.audit.write(ctx, doc)
	runTransition(ws.metrics, doc.TenantID, agent.Slug, agent.flow.machine, "", doc.Status)
	attrs := []slog.Attr{slog.String("runId", doc.RunID), slog.String("type", agent.Slug),
		slog.String("idempotencyKey", doc.IdempotencyKey), slog.String("initiator", string(b.tc.Initiator))}
	level := slog.LevelInfo
	if msg != "run_created" {
		level = slog.LevelWarn
	}
	ws.log.LogAttrs(ctx, level, msg, append(attrs, contextAttrs(&b.tc)...)...)
	ws.changes.broadcast()
}

// moveStatusIndex moves a run's status entry from the status from to its
// status now, after the write that moved it. A failure is logged and noted
// as an index gap: the write has happened, the gap keeps the run's active
// entry (cleanup), and the poll's repair finds the run by it.
func (h *history) moveStatusIndex(ctx context.Context, doc *lifecycle.RunStatus, from string) {
	if from == doc.Status {
		return
	}
	err := h.putStatusEntry(ctx, doc)
	if err == nil {
		var old string
		if old, err = layout.TenantRunStatusIndexKey(doc.TenantID, doc.AgentSlug, from, doc.StartedAt, doc.RunID); err == nil {
			err = h.store.Delete(ctx, old, storage.Condition{})
		}
	}
	h.noteGap(doc.RunID, err != nil)
	if err != nil && ctx.Err() == nil {
		h.log.LogAttrs(ctx, slog.LevelWarn, "run_index_move_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
	}
}

// putStatusEntry writes a run's entry under its status now.
func (h *history) putStatusEntry(ctx context.Context, doc *lifecycle.RunStatus) error {
	key, err := layout.TenantRunStatusIndexKey(doc.TenantID, doc.AgentSlug, doc.Status, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	return putOnce(ctx, h.store, key, nil)
}

// noteGap notes whether a run's status index entry is known not to
// match its status (gap) or was just made to.
func (h *history) noteGap(runID string, gap bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if gap {
		h.gaps[runID] = true
	} else {
		delete(h.gaps, runID)
	}
}

// gap tells whether a run's status index entry is known not to match.
func (h *history) gap(runID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gaps[runID]
}

// auditLog records every status write: its audit event in the store
// (docs/spec.md#audit-event) and its run_transition log line. It
// remembers, by run, the last event it knows is in the log (done) and the
// runs whose last event could not be written (gaps). A gap keeps the run's
// active entry, so the poll finds the run and repairs it.
type auditLog struct {
	store   *storage.Store
	now     func() time.Time
	log     *slog.Logger
	timeout time.Duration // Config.AuditTimeout

	mu   sync.Mutex
	done map[string]string
	gaps map[string]bool
}

// auditObject is where and what the audit object of a record is.
func auditObject(a *lifecycle.RunAuditRecord) (string, []byte, error) {
	key, err := layout.AuditKey(a.Event.TS, a.ID)
	if err != nil {
		return "", nil, err
	}
	b, err := json.Marshal(a.Event)
	return key, b, err
}

// record records a status write that made doc from the status from, by
// actor with the transition context tc: its audit event, which the writer
// put in doc (docs/spec.md#audit-event), and its run_transition log line
// (docs/spec.md#metrics).
func (al *auditLog) record(ctx context.Context, doc *lifecycle.RunStatus, from string, actor lifecycle.Actor, tc lifecycle.TransitionContext) {
	al.write(ctx, doc)
	if from != doc.Status {
		attrs := append(make([]slog.Attr, 0, 9), slog.String("runId", doc.RunID),
			slog.String("from", from), slog.String("to", doc.Status), slog.String("initiator", string(tc.Initiator)),
			slog.String("actor", string(actor)))
		al.log.LogAttrs(ctx, slog.LevelInfo, "run_transition", append(attrs, contextAttrs(&tc)...)...)
	}
}

// write writes the audit event of the write that made doc, with its
// own budget (AuditTimeout). A failure is logged, not returned, because
// the write has happened: the run is marked as having an audit gap, so its
// active entry stays until the event is written (ensure, by the next
// writer or a poll).
func (al *auditLog) write(ctx context.Context, doc *lifecycle.RunStatus) {
	a := doc.LastAudit
	if a == nil {
		return
	}
	actx, cancel := audit.Context(ctx, al.timeout)
	defer cancel()
	key, b, err := auditObject(a)
	if err == nil {
		err = audit.Put(actx, al.store, key, b)
	}
	al.audited(doc.RunID, a.ID, err == nil)
	if err != nil {
		al.log.LogAttrs(ctx, slog.LevelError, "audit_write_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
	}
}

// ensure makes sure the audit event doc records (its last write's)
// is in the audit log: known written by this runner, found, or written now.
func (al *auditLog) ensure(ctx context.Context, doc *lifecycle.RunStatus) error {
	a := doc.LastAudit
	if a == nil {
		return nil
	}
	al.mu.Lock()
	known := al.done[doc.RunID] == a.ID
	al.mu.Unlock()
	if known {
		return nil
	}
	key, b, err := auditObject(a)
	if err == nil {
		err = audit.Ensure(ctx, al.store, key, b)
	}
	if err != nil {
		return fmt.Errorf("run: audit event %s of run %s: %w", a.ID, doc.RunID, err)
	}
	al.audited(doc.RunID, a.ID, true)
	return nil
}

// audited notes whether the audit event id of a run is in the log (ok) or
// could not be written (a gap, which keeps the run's active entry).
func (al *auditLog) audited(runID, id string, ok bool) {
	al.mu.Lock()
	defer al.mu.Unlock()
	if ok {
		al.done[runID] = id
		delete(al.gaps, runID)
		return
	}
	al.gaps[runID] = true
}

// auditGap tells whether a run's last audit event is known missing.
func (al *auditLog) gap(runID string) bool {
	al.mu.Lock()
	defer al.mu.Unlock()
	return al.gaps[runID]
}

// forgetAudit drops what this runner knows of a run's audit, once the run
// ended and its last event is in the log.
func (al *auditLog) forget(runID string) {
	al.mu.Lock()
	defer al.mu.Unlock()
	delete(al.done, runID)
}

// contextAttrs are the parts of a transition context a log line adds to
// the event's own fields (run id, initiator and time are there already).
func contextAttrs(tc *lifecycle.TransitionContext) []slog.Attr {
	var attrs []slog.Attr
	if tc.UserID != "" {
		attrs = append(attrs, slog.String("userId", tc.UserID))
	}
	if len(tc.Metadata) > 0 {
		attrs = append(attrs, slog.Any("metadata", tc.Metadata))
	}
	if tc.Approval != nil {
		attrs = append(attrs, slog.Any("approval", tc.Approval))
	}
	if tc.External != nil {
		attrs = append(attrs, slog.Any("externalEvent", tc.External))
	}
	return attrs
}
