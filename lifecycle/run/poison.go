package run

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// readStatus reads and validates a run's status.json. A poison document is
// quarantined (see quarantineRun); a missing one that was quarantined gives
// a *QuarantinedError too, so Wait and Status report it.
//
// A poison document that changes between the read and its quarantine (a
// repair, another writer, another runner's quarantine) is read again: the
// caller gets what the record is now, never the quarantine's refused
// compare-and-swap. After maxPoisonRereads such changes in a row it gets
// the *records.CorruptError (RECORD_QUARANTINED) of the last read.
func (r *Runner) readStatus(ctx context.Context, slug, runID, key string) (Status, storage.Version, error) {
	for attempt := 0; ; attempt++ {
		b, v, err := r.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			if qe := r.findQuarantined(ctx, runID, key); qe != nil {
				return Status{}, "", qe
			}
		}
		if err != nil {
			return Status{}, "", err
		}
		if r.absent.Settle > 0 {
			r.absent.Found(key)
		}
		doc, err := core.Decode[Status](key, b, v, r.statusValidator(slug, runID))
		var ce *records.CorruptError
		if errors.As(err, &ce) {
			qerr := r.quarantineRun(ctx, slug, runID, ce)
			if errors.Is(qerr, storage.ErrPreconditionFailed) {
				if attempt < maxPoisonRereads {
					continue // it changed since the read: judge it again
				}
				return Status{}, "", ce
			}
			return Status{}, "", qerr
		}
		return doc, v, err
	}
}

// maxPoisonRereads bounds how often readStatus reads again a poison
// status.json that keeps changing under its quarantine.
const maxPoisonRereads = 3

// findQuarantined looks for a quarantined copy of a run's status.
func (r *Runner) findQuarantined(ctx context.Context, runID, key string) *QuarantinedError {
	qkey, reason, ok := records.FindQuarantined(ctx, r.store, key)
	if !ok {
		return nil
	}
	return &QuarantinedError{RunID: runID, Key: key, QKey: qkey, Reason: reason}
}

// quarantineRun moves a poison status.json out of the way and frees what
// the run held: its execution here (stopped), its slot and its active
// entry, so the agent's other runs go on. It is counted and logged at WARN.
func (r *Runner) quarantineRun(ctx context.Context, slug, runID string, ce *records.CorruptError) error {
	qkey, err := r.quarantine(ctx, ce)
	if err != nil {
		return err
	}
	qe := &QuarantinedError{RunID: runID, Key: ce.Key, QKey: qkey, Reason: ce.Reason}
	if ce.Err != nil {
		qe.Reason += ": " + ce.Err.Error()
	}
	r.mu.Lock()
	x := r.executing[runID]
	r.mu.Unlock()
	if x != nil {
		x.stop(qe) // its finish frees its slot
	} else {
		r.freeSlotsOf(ctx, slug, runID)
	}
	if key, err := layout.RunActiveKey(slug, runID); err == nil {
		if err := r.store.Delete(ctx, key, storage.Condition{}); err != nil && !errors.Is(err, storage.ErrNotFound) {
			r.log.LogAttrs(ctx, slog.LevelWarn, "active_index_cleanup_failed", slog.String("runId", runID), slog.String("error", err.Error()))
		}
	}
	r.broadcast()
	return qe
}

// quarantine moves one poison record under the quarantine prefix, counts
// it and logs record_quarantined at WARN. A record that changed since it
// was read (someone repaired it) is left alone: the error matches
// storage.ErrPreconditionFailed and the caller reads it again later.
func (r *Runner) quarantine(ctx context.Context, ce *records.CorruptError) (string, error) {
	qkey, err := r.quar.Move(ctx, ce)
	if err != nil {
		return qkey, err
	}
	if m, ok := r.cfg.Metrics.(quarantineMetrics); ok {
		m.RecordQuarantined(quarantineKind(ce.Key))
	}
	return qkey, nil
}

func isRunStatusKey(key string) bool {
	_, _, ok := layout.ParseRunStatusKey(key)
	return ok
}

func quarantineKind(key string) string {
	switch {
	case isRunStatusKey(key):
		return "run_status"
	case layout.IsRunSlotKey(key):
		return "slot"
	case strings.HasPrefix(key, layout.RunIndexPrefix):
		return "run_index"
	}
	return "other"
}

// quarantineMetrics is a Metrics that also counts poison records the
// Runner quarantined (see Metrics).
type quarantineMetrics interface {
	RecordQuarantined(kind string)
}

// stepMetrics is a Metrics that also observes step durations (see Metrics).
type stepMetrics interface {
	StepFinished(agent, step, status string, d time.Duration)
}

// stragglerMetrics is a Metrics that also counts abandoned step attempts
// (see Metrics).
type stragglerMetrics interface {
	StepAbandoned(agent, step string)
}
