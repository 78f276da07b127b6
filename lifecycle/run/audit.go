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
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

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
