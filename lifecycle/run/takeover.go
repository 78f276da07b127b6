package run

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// takeover takes up what a lost process left: a run executing under a
// lease that lapsed (or, at startup, under this runner's own lease), and
// a submit that stopped after its active entry but before its status.
type takeover struct {
	store   *storage.Store
	now     func() time.Time
	log     *slog.Logger
	owner   string        // Config.Owner
	lease   time.Duration // Config.LeaseDuration
	absent  *evidence.Absence
	cat     *catalog
	history *history
	writers *writers
	claims  *claims
	ender   *ender
	inbox   *inbox
}

// resumeExecuting starts a run in an executing state that no one holds:
// one resumed after an approval or event, or an orphan (its lease expired,
// or this runner's own lease found at startup).
func (t *takeover) resumeExecuting(ctx context.Context, c candidate, doc *lifecycle.RunStatus, now time.Time, startup bool) {
	switch {
	case doc.Lease == nil:
		t.claims.startOrWait(ctx, c, false) // resumed after an approval or event
	case t.claims.unsureWrote(doc.RunID, doc.Lease):
		t.log.LogAttrs(ctx, slog.LevelWarn, "claim_recovered", slog.String("runId", doc.RunID),
			slog.Int64("epoch", doc.Lease.Epoch))
		t.claims.startOrWait(ctx, c, true)
	case now.After(doc.Lease.ExpiresAt) || (startup && doc.Lease.Owner == t.owner):
		t.log.LogAttrs(ctx, slog.LevelWarn, "orphan_detected", slog.String("runId", doc.RunID),
			slog.Time("lastHeartbeat", derefTime(doc.LastHeartbeatAt)), slog.String("owner", doc.Lease.Owner))
		t.claims.startOrWait(ctx, c, true)
	}
}

// finishSubmit finishes the submit of a run whose active entry exists but
// whose status.json does not, once the submit had a lease's time to write
// it (a submit that takes longer loses nothing: its status write is
// create-only and finds this one). The run is created as its submit would
// have created it, and goes on; when its input.json never landed it ends
// failed at once, since no step may run without its input. Nothing is done
// for an entry written before active entries carried the pending status.
func (t *takeover) finishSubmit(ctx context.Context, slug, runID, statusKey string) {
	agent, ok := t.cat.agent(slug)
	if !ok {
		return
	}
	e, ok := t.pendingSubmit(ctx, slug, runID)
	if !ok {
		return
	}
	doc := *e.Pending
	idxKey, err := layout.RunIndexKey(runID)
	if err != nil {
		return
	}
	entry, _ := json.Marshal(runIndexEntry{AgentSlug: slug, Machine: doc.Machine, TenantID: doc.TenantID})
	if putOnce(ctx, t.store, idxKey, entry) != nil {
		return
	}
	inputLost, ok := t.inputLost(ctx, slug, runID, e.Input)
	if !ok {
		return
	}
	if t.history.indexCreated(ctx, &doc) != nil {
		return
	}
	ver, err := records.Create(ctx, t.store, statusKey, &doc)
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
	t.writers.afterCreate(ctx, agent, &doc, b, "run_submit_finished")
	w := t.writers.newWriter(slug, runID, statusKey, &doc, ver)
	if !inputLost {
		t.inbox.hand(candidate{slug: slug, w: w})
		return
	}
	t.failInputLost(ctx, w)
}

// pendingSubmit reads the active entry of a run whose status is missing:
// ok when it carries the run's first status, valid, and its submit had a
// lease's time to write it.
func (t *takeover) pendingSubmit(ctx context.Context, slug, runID string) (activeEntry, bool) {
	active, err := layout.RunActiveKey(slug, runID)
	if err != nil {
		return activeEntry{}, false
	}
	raw, _, err := t.store.Get(ctx, active)
	if err != nil {
		return activeEntry{}, false
	}
	var e activeEntry
	if json.Unmarshal(raw, &e) != nil || e.Pending == nil || e.Pending.RunID != runID || e.Pending.AgentSlug != slug {
		return activeEntry{}, false
	}
	if !t.now().After(e.Pending.StartedAt.Add(t.lease)) {
		return activeEntry{}, false // its submit may still be writing
	}
	if err := statusValidator(slug, runID)(e.Pending); err != nil {
		return activeEntry{}, false
	}
	return e, true
}

// inputLost tells whether the input.json a stopped submit had (hasInput)
// never landed; ok is false while that cannot be told yet.
func (t *takeover) inputLost(ctx context.Context, slug, runID string, hasInput bool) (lost, ok bool) {
	if !hasInput {
		return false, true
	}
	inKey, err := layout.RunInputKey(slug, runID)
	if err != nil {
		return false, false
	}
	_, _, err = t.store.Get(ctx, inKey)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return false, false
	}
	if err != nil && !t.absent.Confirmed(inKey, t.now()) {
		return false, false // read missing once on a store that settles: a later poll looks again
	}
	if err == nil && t.absent.Settle > 0 {
		t.absent.Found(inKey)
	}
	return err != nil, true
}

// failInputLost ends failed (or canceled) a run whose submit stopped
// before its input was written: no step may run without it.
func (t *takeover) failInputLost(ctx context.Context, w *statusWriter) {
	doc := w.snapshot()
	f := t.cat.flowOfDoc(&doc)
	err := w.apply(ctx, bySystem(), func(ctx context.Context, d *lifecycle.RunStatus) error {
		ev := f.fail
		if _, ok := f.target(d.Status, ev); !ok {
			ev = f.cancel
		}
		if err := f.fire(ctx, d, ev, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		t.ender.finishFields(d, lifecycle.NewRunError(codes.InternalError, "its submit stopped before its input was written"))
		return nil
	})
	if err != nil {
		t.log.LogAttrs(ctx, slog.LevelWarn, "run_not_advanced", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
		return
	}
	t.ender.cleanup(ctx, doc.AgentSlug, doc.RunID, "", "")
	t.ender.finished(ctx, w.snapshot())
}
