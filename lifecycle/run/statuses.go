package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/quarantine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// statuses reads runs' status.json and quarantines a poison one: moved
// out of the way, with what the run held freed (release: its execution
// here stopped, else its slots) and its active entry deleted, so the
// agent's other runs go on.
type statuses struct {
	store   *storage.Store
	log     *slog.Logger
	absent  *evidence.Absence
	poison  *poison
	changes *changes
	// release frees what a quarantined run held; set once the slots are
	// made (they read statuses themselves).
	release func(ctx context.Context, slug, runID string, cause error)
}

// read reads and validates a run's status.json. A poison document is
// quarantined (see quarantineRun); a missing one that was quarantined gives
// a *lifecycle.QuarantinedError too, so Wait and Status report it.
//
// A poison document that changes between the read and its quarantine (a
// repair, another writer, another runner's quarantine) is read again: the
// caller gets what the record is now, never the quarantine's refused
// compare-and-swap. After maxPoisonRereads such changes in a row it gets
// the *lifecycle.QuarantinedError (RECORD_QUARANTINED) of the last read.
func (st *statuses) read(ctx context.Context, slug, runID, key string) (lifecycle.RunStatus, storage.Version, error) {
	for attempt := 0; ; attempt++ {
		b, v, err := st.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			if qe := st.findQuarantined(ctx, runID, key); qe != nil {
				return lifecycle.RunStatus{}, "", qe
			}
		}
		if err != nil {
			return lifecycle.RunStatus{}, "", err
		}
		if st.absent.Settle > 0 {
			st.absent.Found(key)
		}
		doc, err := fence.Decode[lifecycle.RunStatus](key, b, v, statusValidator(slug, runID))
		var ce *lifecycle.QuarantinedError
		if errors.As(err, &ce) {
			qerr := st.quarantineRun(ctx, slug, runID, ce)
			if errors.Is(qerr, storage.ErrPreconditionFailed) {
				if attempt < maxPoisonRereads {
					continue // it changed since the read: judge it again
				}
				return lifecycle.RunStatus{}, "", ce
			}
			return lifecycle.RunStatus{}, "", qerr
		}
		return doc, v, err
	}
}

// findQuarantined looks for a quarantined copy of a run's status.
func (st *statuses) findQuarantined(ctx context.Context, runID, key string) *lifecycle.QuarantinedError {
	qkey, reason, ok := records.FindQuarantined(ctx, st.store, key)
	if !ok {
		return nil
	}
	return &lifecycle.QuarantinedError{ID: runID, Key: key, QKey: qkey, Reason: reason}
}

// quarantineRun moves a poison status.json out of the way and frees what
// the run held: its execution here (stopped), its slot and its active
// entry, so the agent's other runs go on. It is counted and logged at WARN.
func (st *statuses) quarantineRun(ctx context.Context, slug, runID string, ce *lifecycle.QuarantinedError) error {
	if ce.QKey != "" {
		return ce // moved already, and what the run held released then
	}
	qkey, err := st.poison.quarantine(ctx, ce)
	if err != nil {
		return err
	}
	qe := &lifecycle.QuarantinedError{ID: runID, Key: ce.Key, QKey: qkey, Reason: ce.Reason}
	if ce.Err != nil {
		qe.Reason += ": " + ce.Err.Error()
	}
	st.release(ctx, slug, runID, qe)
	if key, err := layout.RunActiveKey(slug, runID); err == nil {
		if err := st.store.Delete(ctx, key, storage.Condition{}); err != nil && !errors.Is(err, storage.ErrNotFound) {
			st.log.LogAttrs(ctx, slog.LevelWarn, "active_index_cleanup_failed", slog.String("runId", runID), slog.String("error", err.Error()))
		}
	}
	st.changes.broadcast()
	return qe
}

// maxPoisonRereads bounds how often read reads again a poison
// status.json that keeps changing under its quarantine.
const maxPoisonRereads = 3

// statusValidator judges a decoded status.json: it must name the run and
// agent of its key, and its status must be a state of the run's machine.
// The machine is the one the run was created with, even where this
// runner's config now gives its agent another (a rolling change of config):
// such a run is valid and lives out its life on its own machine.
// A document that fails is poison: it is quarantined, never acted on.
func statusValidator(slug, runID string) func(*lifecycle.RunStatus) error {
	return func(d *lifecycle.RunStatus) error {
		if d.RunID != runID {
			return fmt.Errorf("run_id %q at the key of run %s", d.RunID, runID)
		}
		if d.AgentSlug != slug {
			return fmt.Errorf("agent_slug %q at the key of agent %s", d.AgentSlug, slug)
		}
		f, ok := flowFor(d.Machine)
		if !ok {
			return fmt.Errorf("unknown machine %q", d.Machine)
		}
		if !f.isState(d.Status) {
			return fmt.Errorf("status %q is not a state of %s", d.Status, f.machine)
		}
		return nil
	}
}

// poison moves poison records to quarantine (quarantine.Mover), counts
// them and logs each.
type poison struct {
	quar    *quarantine.Mover
	metrics Metrics
}

// count is how many records were moved to quarantine.
func (p *poison) count() int64 { return p.quar.Count() }

// quarantine moves one poison record under the quarantine prefix, counts
// it and logs record_quarantined at WARN. A record that changed since it
// was read (someone repaired it) is left alone: the error matches
// storage.ErrPreconditionFailed and the caller reads it again later.
func (p *poison) quarantine(ctx context.Context, ce *lifecycle.QuarantinedError) (string, error) {
	qkey, err := p.quar.Move(ctx, ce)
	if err != nil {
		return qkey, err
	}
	if m, ok := p.metrics.(quarantineMetrics); ok {
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
