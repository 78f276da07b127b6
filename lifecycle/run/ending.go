package run

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// ender does what every end of a run does, whoever ends it (its
// execution, the poll, a control call): the terminal fields, the slot and
// active entry freed, the log line and metrics.
type ender struct {
	store    *storage.Store
	now      func() time.Time
	log      *slog.Logger
	metrics  Metrics
	slots    *slots
	audit    *auditLog
	history  *history
	verdicts *verdicts
}

// cleanup removes a finished or parked run from the active index (finished
// only) and frees its slot.
//
// A run whose last audit event could not be written, or whose status index
// entry could not be moved, keeps its active entry: a poll finds it there,
// writes the event (auditLog.ensure) or repairs the entries (history.repairRun) and
// cleans up then.
func (e *ender) cleanup(ctx context.Context, slug, runID, slot string, slotVer storage.Version) {
	e.slots.release(ctx, slug, slot, slotVer)
	e.verdicts.forget(runID)
	if e.audit.gap(runID) || e.history.gap(runID) {
		return // the poll finds the run by its active entry and repairs it
	}
	e.audit.forget(runID)
	key, err := layout.RunActiveKey(slug, runID)
	if err != nil {
		return
	}
	if err := e.store.Delete(ctx, key, storage.Condition{}); err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "active_index_cleanup_failed", slog.String("runId", runID), slog.String("error", err.Error()))
	}
}

// finishFields sets what a terminal write records (docs/spec.md#run-status).
func (e *ender) finishFields(d *Status, runErr error) {
	now := e.now()
	d.FinishedAt = &now
	d.DurationMS = now.Sub(d.StartedAt).Milliseconds()
	d.Lease = nil
	if runErr != nil {
		var re *lifecycle.RunError
		msg := runErr.Error()
		if !errors.As(runErr, &re) {
			msg = codes.InternalError + ": " + msg
		}
		d.Error = &msg
	}
}

// finished records a run's end in logs and metrics.
func (e *ender) finished(ctx context.Context, d Status) {
	dur := time.Duration(d.DurationMS) * time.Millisecond
	e.metrics.RunFinished(d.AgentSlug, d.Status, dur)
	e.log.LogAttrs(ctx, slog.LevelInfo, "run_completed", slog.String("runId", d.RunID),
		slog.Int64("durationMs", d.DurationMS), slog.String("status", d.Status))
}
