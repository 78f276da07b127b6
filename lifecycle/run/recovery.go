package run

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// finishSubmit finishes the submit of a run whose active entry exists but
// whose status.json does not, once the submit had a lease's time to write
// it (a submit that takes longer loses nothing: its status write is
// create-only and finds this one). The run is created as its submit would
// have created it, and goes on; when its input.json never landed it ends
// failed at once, since no step may run without its input. Nothing is done
// for an entry written before active entries carried the pending status.
func (r *Runner) finishSubmit(ctx context.Context, slug, runID, statusKey string) {
	agent, ok := r.agents[slug]
	if !ok {
		return
	}
	active, err := layout.RunActiveKey(slug, runID)
	if err != nil {
		return
	}
	raw, _, err := r.store.Get(ctx, active)
	if err != nil {
		return
	}
	var e activeEntry
	if json.Unmarshal(raw, &e) != nil || e.Pending == nil || e.Pending.RunID != runID || e.Pending.AgentSlug != slug {
		return
	}
	if !r.now().After(e.Pending.StartedAt.Add(r.cfg.LeaseDuration)) {
		return // its submit may still be writing
	}
	doc := *e.Pending
	if err := r.statusValidator(slug, runID)(&doc); err != nil {
		return
	}
	idxKey, err := layout.RunIndexKey(runID)
	if err != nil {
		return
	}
	entry, _ := json.Marshal(runIndexEntry{AgentSlug: slug, Machine: doc.Machine})
	if r.putOnce(ctx, idxKey, entry) != nil {
		return
	}
	inputLost := false
	if e.Input {
		inKey, err := layout.RunInputKey(slug, runID)
		if err != nil {
			return
		}
		_, _, err = r.store.Get(ctx, inKey)
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return
		}
		if err != nil && !r.absent.Confirmed(inKey, r.now()) {
			return // read missing once on a store that settles: a later poll looks again
		}
		if err == nil && r.absent.Settle > 0 {
			r.absent.Found(inKey)
		}
		inputLost = err != nil
	}
	if r.indexCreated(ctx, &doc) != nil {
		return
	}
	ver, err := records.Create(ctx, r.store, statusKey, &doc)
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
	r.recordCreated(ctx, agent, &doc, b, "run_submit_finished")
	w := r.newWriter(slug, runID, statusKey, &doc, ver)
	if !inputLost {
		r.hand(candidate{slug: slug, w: w})
		return
	}
	f := r.flowOfDoc(&doc)
	err = w.apply(ctx, bySystem(), func(ctx context.Context, d *Status) error {
		ev := f.fail
		if _, ok := f.target(d.Status, ev); !ok {
			ev = f.cancel
		}
		if err := f.fire(ctx, d, ev, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		r.finishFields(d, lifecycle.NewRunError(codes.InternalError, "its submit stopped before its input was written"))
		return nil
	})
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "run_not_advanced", slog.String("runId", runID), slog.String("error", err.Error()))
		return
	}
	r.cleanup(ctx, slug, runID, "", "")
	r.finished(ctx, w.snapshot())
}

// poll looks at every run not yet terminal, through the active index, and
// then at the runs waiting for a slot. A run it can only watch (executing
// under another runner's live lease, or parked) is not read again until it
// may need this runner: its lease may have lapsed, its external wait's
// deadline passed, or ParkedPollInterval passed. So a poll costs a List and
// a read per run that may move, not a read of every active run. It
// reports whether it found work: a run to read that the last poll did not
// list (the adaptive poll looks again soon after such a poll; a run read
// at every poll without moving must not keep it busy).
func (r *Runner) poll(ctx context.Context, startup bool) (found bool) {
	now := r.now()
	r.maybeRepairIndexes(ctx, now)
	quiet := make(map[string]time.Time, len(r.quiet))
	listed := make(map[string]bool, len(r.listed))
	defer func() { r.quiet, r.listed = quiet, listed }()
	for key, err := range r.store.List(ctx, layout.RunActivePrefix) {
		if err != nil {
			if ctx.Err() == nil {
				r.log.LogAttrs(ctx, slog.LevelError, "poll_failed", slog.String("error", err.Error()))
			}
			return
		}
		slug, runID, ok := layout.ParseRunActiveKey(key)
		if !ok {
			continue
		}
		listed[runID] = true
		if r.isExecuting(runID) || r.isWaiting(slug, runID) {
			continue
		}
		if _, known := r.agents[slug]; !known {
			continue // another service's agent
		}
		if until, ok := r.quiet[runID]; ok && now.Before(until) {
			quiet[runID] = until
			continue
		}
		statusKey, err := layout.RunStatusKey(slug, runID)
		if err != nil {
			continue
		}
		doc, ver, err := r.readStatus(ctx, slug, runID, statusKey)
		if errors.Is(err, storage.ErrNotFound) && !errors.Is(err, records.ErrCorrupt) {
			// Its submit has not written the status yet, or stopped
			// half-way: finished once it had a lease's time, and (on a
			// store that settles) once a read Settle later still finds
			// no status, since finishing writes the status create-only,
			// which such a store may take over the run's own.
			if r.absent.Confirmed(statusKey, now) {
				r.finishSubmit(ctx, slug, runID, statusKey)
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return // the pass is over; the next one goes on
			}
			if !errors.Is(err, records.ErrCorrupt) { // quarantined: logged there
				r.log.LogAttrs(ctx, slog.LevelError, "poll_failed", slog.String("runId", runID), slog.String("error", err.Error()))
			}
			continue
		}
		found = found || !r.listed[runID]
		r.consider(ctx, candidate{slug: slug, w: r.newWriter(slug, runID, statusKey, &doc, ver)}, startup)
		if until := r.quietUntil(r.flowOfDoc(&doc), &doc, now); !until.IsZero() {
			quiet[runID] = until
		}
	}
	for runID := range r.unsure {
		if !listed[runID] { // no longer active: nothing to take up
			delete(r.unsure, runID)
		}
	}
	r.mu.Lock()
	waiting := r.waiting
	r.waiting = map[string][]candidate{}
	r.mu.Unlock()
	for _, list := range waiting {
		for _, c := range list {
			r.consider(ctx, c, false)
		}
	}
	return found
}

// quietUntil is until when a run that consider left alone cannot need
// this runner: the end of another runner's live lease; for a parked run
// ParkedPollInterval or its external deadline, whichever comes first; for
// a keyed run waiting out the store's settle time before it may go, the
// end of that wait. Zero means it should be read at every poll.
func (r *Runner) quietUntil(f *flow, doc *Status, now time.Time) time.Time {
	if until := r.dedupeWaitEnds(f, doc); now.Before(until) {
		return until
	}
	switch {
	case f.executing(doc.Status) && doc.Lease != nil && doc.Lease.Owner != r.cfg.Owner && !now.After(doc.Lease.ExpiresAt):
		return doc.Lease.ExpiresAt
	case doc.Lease == nil && slices.Contains(f.parked, doc.Status):
		until := now.Add(r.cfg.ParkedPollInterval)
		if doc.External != nil && doc.External.Deadline != nil && doc.External.Deadline.Before(until) {
			until = *doc.External.Deadline
		}
		return until
	}
	return time.Time{}
}

func (r *Runner) isExecuting(runID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.executing[runID]
	return ok
}

func (r *Runner) isWaiting(slug, runID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.waiting[slug] {
		if c.w.runID == runID {
			return true
		}
	}
	return false
}

// consider moves one run forward as far as this runner can: admit it, start
// it if a slot is free, take it over if its runner was lost, expire its
// external wait, or clean up after it.
func (r *Runner) consider(ctx context.Context, c candidate, startup bool) {
	doc := c.w.snapshot()
	f := r.flowOfDoc(&doc)
	if r.isExecuting(doc.RunID) {
		return // this runner has it; a stale copy must not start it twice
	}
	if !r.dedupeGate(ctx, c, f, &doc) {
		return // not yet decided, or a duplicate ended here
	}
	now := r.now()
	var err error
	if f.terminal(doc.Status) || (doc.Lease == nil && slices.Contains(f.parked, doc.Status)) {
		if !r.repairAudit(ctx, &doc) {
			return
		}
	}
	switch {
	case f.terminal(doc.Status):
		// Its writer may have died between the terminal write and the
		// index move: repair the entries before the active entry goes.
		if err := r.repairRunIndex(ctx, &doc); err != nil {
			r.repairFailed(ctx, err)
			return
		}
		r.noteIndexGap(doc.RunID, false)
		r.cleanup(ctx, c.slug, doc.RunID, "", "")
		return
	case doc.Status == f.initial && f.admit != "":
		err = r.admit(ctx, c, f)
	case doc.Status == f.waiting && r.queueExpired(f, doc, now):
		err = r.expireQueued(ctx, c, f, doc.RunID)
	case doc.Status == f.waiting:
		r.startOrWait(ctx, c, false)
		return
	case f.executing(doc.Status):
		r.resumeExecuting(ctx, c, &doc, now, startup)
		return
	case doc.CancelRequested && f.cancel != "" && doc.Lease == nil && slices.Contains(f.parked, doc.Status):
		err = r.cancelParked(ctx, c, f, doc.RunID)
	case externalExpired(&doc, now):
		err = r.expireExternal(ctx, c, f, &doc)
	}
	if err != nil && ctx.Err() == nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "run_not_advanced", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
	}
}

// repairAudit writes the audit event of the last write of a run at rest,
// if that write's own audit failed: no writer may come soon to do it. It
// reports false when the repair failed and the look must stop.
func (r *Runner) repairAudit(ctx context.Context, doc *Status) bool {
	if err := r.ensureAudit(ctx, doc); err != nil {
		if ctx.Err() == nil {
			r.log.LogAttrs(ctx, slog.LevelWarn, "audit_repair_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
		}
		return false
	}
	return true
}

// admit moves a new run past the flow's admission and starts it or queues
// it for a slot.
func (r *Runner) admit(ctx context.Context, c candidate, f *flow) error {
	err := c.w.apply(ctx, bySystem(), func(ctx context.Context, d *Status) error {
		return f.fire(ctx, d, f.admit, lifecycle.ActorOrchestration)
	})
	if err == nil {
		r.startOrWait(ctx, c, false)
	}
	return err
}

// expireQueued fails a run that waited for a slot longer than the queue
// timeout.
func (r *Runner) expireQueued(ctx context.Context, c candidate, f *flow, runID string) error {
	err := c.w.apply(ctx, byTimeout(), func(ctx context.Context, d *Status) error {
		if err := f.fire(ctx, d, f.fail, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		r.finishFields(d, lifecycle.NewRunError(codes.AgentTimeout, "queued longer than %s", seconds(r.cfg.QueueTimeout)))
		return nil
	})
	if err == nil {
		r.cleanup(ctx, c.slug, runID, "", "")
		r.finished(ctx, c.w.snapshot())
	}
	return err
}

// resumeExecuting starts a run in an executing state that no one holds:
// one resumed after an approval or event, or an orphan (its lease expired,
// or this runner's own lease found at startup).
func (r *Runner) resumeExecuting(ctx context.Context, c candidate, doc *Status, now time.Time, startup bool) {
	switch {
	case doc.Lease == nil:
		r.startOrWait(ctx, c, false) // resumed after an approval or event
	case r.unsure[doc.RunID].wrote(doc.Lease):
		r.log.LogAttrs(ctx, slog.LevelWarn, "claim_recovered", slog.String("runId", doc.RunID),
			slog.Int64("epoch", doc.Lease.Epoch))
		r.startOrWait(ctx, c, true)
	case now.After(doc.Lease.ExpiresAt) || (startup && doc.Lease.Owner == r.cfg.Owner):
		r.log.LogAttrs(ctx, slog.LevelWarn, "orphan_detected", slog.String("runId", doc.RunID),
			slog.Time("lastHeartbeat", derefTime(doc.LastHeartbeatAt)), slog.String("owner", doc.Lease.Owner))
		r.startOrWait(ctx, c, true)
	}
}

// cancelParked ends canceled a parked run that carries an acknowledged
// cancel (parked by a writer that missed the request).
func (r *Runner) cancelParked(ctx context.Context, c candidate, f *flow, runID string) error {
	err := c.w.apply(ctx, bySystem(), func(ctx context.Context, d *Status) error {
		if !d.CancelRequested || d.Lease != nil || !slices.Contains(f.parked, d.Status) {
			return nil // moved on meanwhile
		}
		if err := f.fire(ctx, d, f.cancel, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		r.finishFields(d, nil)
		return nil
	})
	if err == nil {
		if after := c.w.snapshot(); f.terminal(after.Status) {
			r.cleanup(ctx, c.slug, runID, "", "")
			r.finished(ctx, after)
		}
	}
	return err
}

// externalExpired reports whether doc waits for an external event whose
// deadline has passed.
func externalExpired(doc *Status, now time.Time) bool {
	return doc.Status == string(lifecycle.ApprovalWaitingExternal) && doc.External != nil && doc.External.Deadline != nil && now.After(*doc.External.Deadline)
}

// expireExternal fails a run whose external event did not come by its
// deadline.
func (r *Runner) expireExternal(ctx context.Context, c candidate, f *flow, doc *Status) error {
	ext := doc.External
	b := byTimeout()
	b.tc.External = &lifecycle.ExternalWait{} // filled from the document written
	err := c.w.apply(ctx, b, func(ctx context.Context, d *Status) error {
		if err := f.fire(ctx, d, f.fail, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		r.finishFields(d, lifecycle.NewRunError(codes.AgentTimeout, "external event %s not received by %s", ext.EventType, ext.Deadline.Format("2006-01-02T15:04:05Z07:00")))
		return nil
	})
	if err == nil {
		r.cleanup(ctx, c.slug, doc.RunID, "", "")
		r.finished(ctx, c.w.snapshot())
	}
	return err
}

// queueExpired tells whether a waiting run outlived QueueTimeout and its
// machine can fail it from there.
func (r *Runner) queueExpired(f *flow, doc Status, now time.Time) bool {
	return r.cfg.QueueTimeout > 0 && now.Sub(doc.StartedAt) > r.cfg.QueueTimeout &&
		f.check(doc.Status, "failed") == nil
}

func derefTime[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
