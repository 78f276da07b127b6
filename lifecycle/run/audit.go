package run

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// auditLog writes the audit event of every status write (docs/spec.md#audit-event)
// and remembers, by run, the last event it knows is in the log (done) and
// the runs whose last event could not be written (gaps). A gap keeps the
// run's active entry, so the poll finds the run and repairs it.
type auditLog struct {
	store   storage.Store
	now     func() time.Time
	log     *slog.Logger
	timeout time.Duration // Config.AuditTimeout
	node    string        // Config.Node

	mu   sync.Mutex
	done map[string]string
	gaps map[string]bool
}

// eventOf is the audit event (docs/spec.md#audit-event) of the write that makes doc,
// from the status from, as b, at version seq of the document.
func (al *auditLog) eventOf(doc *Status, from string, b by, seq int64) *AuditRecord {
	tc := writeContext(doc, b)
	ev := records.AuditEvent{TS: al.now(), Event: "run.status.update", Actor: string(b.actor), RunID: doc.RunID,
		From: from, To: doc.Status, Node: al.node}
	ev.Context, _ = json.Marshal(&tc) // strings, times and maps of strings: it cannot fail
	return &AuditRecord{ID: records.AuditEventID(ev.TS, doc.RunID, seq, 0), Event: ev}
}

// auditObject is where and what the audit object of a record is.
func auditObject(a *AuditRecord) (string, []byte, error) {
	key, err := layout.AuditKey(a.Event.TS, a.ID)
	if err != nil {
		return "", nil, err
	}
	b, err := json.Marshal(a.Event)
	return key, b, err
}

// write writes the audit event of the write that made doc, with its
// own budget (AuditTimeout). A failure is logged, not returned, because
// the write has happened: the run is marked as having an audit gap, so its
// active entry stays until the event is written (ensure, by the next
// writer or a poll).
func (al *auditLog) write(ctx context.Context, doc *Status) {
	a := doc.LastAudit
	if a == nil {
		return
	}
	actx, cancel := core.AuditContext(ctx, al.timeout)
	defer cancel()
	key, b, err := auditObject(a)
	if err == nil {
		err = core.PutAudit(actx, al.store, key, b)
	}
	al.audited(doc.RunID, a.ID, err == nil)
	if err != nil {
		al.log.LogAttrs(ctx, slog.LevelError, "audit_write_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
	}
}

// ensure makes sure the audit event doc records (its last write's)
// is in the audit log: known written by this runner, found, or written now.
func (al *auditLog) ensure(ctx context.Context, doc *Status) error {
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
		err = core.EnsureAudit(ctx, al.store, key, b)
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
