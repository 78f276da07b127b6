package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// startOrWait takes a slot and the lease and starts executing the run, or
// queues it in memory until a slot frees. takeover is set for an orphan.
func (r *Runner) startOrWait(ctx context.Context, c candidate, takeover bool) {
	doc := c.w.snapshot()
	runID := doc.RunID
	slot, slotVer, err := r.acquireSlot(ctx, c.slug, runID)
	if errors.Is(err, errNoSlot) {
		r.mu.Lock()
		r.waiting[c.slug] = append(r.waiting[c.slug], c)
		r.mu.Unlock()
		return
	}
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "slot_failed", slog.String("runId", runID), slog.String("error", err.Error()))
		return
	}
	reclaimOwn := takeover && doc.Lease != nil && doc.Lease.Owner == r.cfg.Owner
	// The execution is registered before its claim is written: a Cancel
	// that lands after the claim finds it (and one that lands before is in
	// the claim's snapshot), so no cancel waits for the next heartbeat.
	x := &execution{r: r, agent: r.agents[c.slug], w: c.w, records: map[int]StepRecord{}, markers: map[int]storage.Version{},
		input: c.input, inputKnown: c.inputKnown, slotKey: slot, slotVer: slotVer}
	r.mu.Lock()
	_, busy := r.executing[runID]
	if !busy {
		r.executing[runID] = x
	}
	r.mu.Unlock()
	if busy { // a stale copy of a run this runner already executes
		r.releaseSlot(ctx, c.slug, slot, slotVer)
		return
	}
	if err := r.claim(ctx, c, reclaimOwn, x); err != nil {
		r.releaseSlot(ctx, c.slug, slot, slotVer)
		r.unregister(runID)
		if ctx.Err() == nil {
			r.log.LogAttrs(ctx, slog.LevelInfo, "run_not_claimed", slog.String("runId", runID), slog.String("error", err.Error()))
		}
		return
	}
	r.wg.Add(1)
	go x.run(clock.Start(r.lifeCtx(), r.cfg.Clock))
}

// acquireSlot takes one of the agent's concurrency slots for runID: one this
// runner freed (a compare-and-swap on the version it wrote, no read), a new
// one (create-only), the one the run already holds (an orphan's), a freed
// one, or one whose run no longer executes. Slots are freed by writing an
// empty holder, never deleted: S3 compare-and-swap writes are atomic where a
// conditional delete on MinIO is not.
func (r *Runner) acquireSlot(ctx context.Context, slug, runID string) (string, storage.Version, error) {
	n := r.agents[slug].concurrency
	body := slotBody(runID)
	keys := make([]string, n)
	for i := range n {
		key, err := layout.RunSlotKey(slug, i)
		if err != nil {
			return "", "", err
		}
		keys[i] = key
	}
	// Slots this runner's own executions hold need no look.
	r.mu.Lock()
	var open []string
	for _, key := range keys {
		if _, held := r.heldSlots[key]; !held {
			open = append(open, key)
		}
	}
	r.mu.Unlock()
	if len(open) == 0 {
		return "", "", errNoSlot
	}
	take := func(key string, v storage.Version) (string, storage.Version, error) {
		r.mu.Lock()
		r.heldSlots[key] = runID
		r.mu.Unlock()
		return key, v, nil
	}
	for _, key := range open {
		r.mu.Lock()
		v, ok := r.freedSlots[key]
		delete(r.freedSlots, key)
		r.mu.Unlock()
		if !ok {
			continue
		}
		if v, err := r.store.Put(ctx, key, body, storage.IfMatch(v)); err == nil {
			return take(key, v)
		}
	}
	for _, key := range open {
		v, err := r.store.Put(ctx, key, body, storage.IfNotExists())
		if err == nil {
			return take(key, v)
		}
		if !errors.Is(err, storage.ErrPreconditionFailed) {
			return "", "", err
		}
	}
	for _, key := range open {
		e, v, err := r.readSlot(ctx, key) // a junk slot is quarantined: not found
		if errors.Is(err, storage.ErrNotFound) {
			if v, err := r.store.Put(ctx, key, body, storage.IfNotExists()); err == nil {
				return take(key, v)
			}
			continue
		}
		if err != nil {
			return "", "", err
		}
		// The slot may still name this run after its runner was lost:
		// rewrite it all the same, so the lost runner's release (a
		// compare-and-swap on the version it wrote) is fenced off.
		if e.RunID == runID || e.RunID == "" || r.slotHolderGone(ctx, slug, e.RunID) {
			if v, err := r.store.Put(ctx, key, body, storage.IfMatch(v)); err == nil {
				return take(key, v)
			}
		}
	}
	return "", "", errNoSlot
}

// slotHolderGone tells whether the run holding a slot no longer executes
// (it ended, parked, or never started), so the slot may be taken.
func (r *Runner) slotHolderGone(ctx context.Context, slug, runID string) bool {
	if r.isExecuting(runID) {
		return false
	}
	key, err := layout.RunStatusKey(slug, runID)
	if err != nil {
		return true
	}
	doc, _, err := r.readStatus(ctx, slug, runID, key)
	if errors.Is(err, records.ErrCorrupt) {
		return true // poison and quarantined
	}
	if errors.Is(err, storage.ErrNotFound) {
		// Gone; on a store that settles, once a read Settle later agrees.
		return r.absent.Confirmed(key, r.now())
	}
	if err != nil {
		return false
	}
	f := r.flowOfDoc(&doc)
	return !f.executing(doc.Status) || doc.Lease == nil
}

// releaseSlot frees a slot this runner holds at version v, unless another
// runner took it meanwhile, and wakes the next run waiting for one.
func (r *Runner) releaseSlot(ctx context.Context, slug, key string, v storage.Version) {
	if key == "" {
		return
	}
	r.mu.Lock()
	delete(r.heldSlots, key)
	r.mu.Unlock()
	free, err := r.store.Put(ctx, key, slotBody(""), storage.IfMatch(v))
	switch {
	case err == nil:
		r.mu.Lock()
		r.freedSlots[key] = free
		r.mu.Unlock()
	case !errors.Is(err, storage.ErrPreconditionFailed):
		r.log.LogAttrs(ctx, slog.LevelWarn, "slot_release_failed", slog.String("slot", key), slog.String("error", err.Error()))
	}
	r.mu.Lock()
	next := r.waiting[slug]
	if len(next) > 0 {
		r.waiting[slug] = next[1:]
	}
	r.mu.Unlock()
	if len(next) > 0 {
		r.hand(next[0])
	}
}

// cleanup removes a finished or parked run from the active index (finished
// only) and frees its slot.
//
// A run whose last audit event could not be written, or whose status index
// entry could not be moved, keeps its active entry: a poll finds it there,
// writes the event (ensureAudit) or repairs the entries (repairRunIndex) and
// cleans up then.
func (r *Runner) cleanup(ctx context.Context, slug, runID, slot string, slotVer storage.Version) {
	r.releaseSlot(ctx, slug, slot, slotVer)
	r.mu.Lock()
	delete(r.dedupeOK, runID)
	r.mu.Unlock()
	if r.auditGap(runID) || r.indexGap(runID) {
		return // the poll finds the run by its active entry and repairs it
	}
	r.forgetAudit(runID)
	key, err := layout.RunActiveKey(slug, runID)
	if err != nil {
		return
	}
	if err := r.store.Delete(ctx, key, storage.Condition{}); err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "active_index_cleanup_failed", slog.String("runId", runID), slog.String("error", err.Error()))
	}
}

// claim writes this runner's lease into the run (epoch + 1), starting it if
// it waits for a slot. It fails when any runner holds a live lease (but for
// reclaimOwn: this runner's own lease left by its previous process, and a
// lease an earlier claim of this runner wrote without learning it had) or
// the run moved on meanwhile.
func (r *Runner) claim(ctx context.Context, c candidate, reclaimOwn bool, x *execution) error {
	runID := c.w.runID
	earlier := r.unsure[runID]
	var f *flow
	var epoch int64
	var resumed bool
	var traceParent string
	tried := &unsureClaim{}
	err := c.w.apply(ctx, bySystem(), func(ctx context.Context, d *Status) error {
		now := r.now()
		traceParent = d.TraceParent
		f = r.flowOfDoc(d)
		ours := false // the lease is an earlier claim's of this runner: it landed
		switch {
		case d.Status == f.waiting:
			if err := f.fire(ctx, d, f.start, lifecycle.ActorOrchestration); err != nil {
				return err
			}
		case f.executing(d.Status):
			ours = earlier.wrote(d.Lease)
			live := d.Lease != nil && !now.After(d.Lease.ExpiresAt)
			if live && !ours && !(reclaimOwn && d.Lease.Owner == r.cfg.Owner) {
				return fmt.Errorf("run: run %s is held by %s until %s", d.RunID, d.Lease.Owner, d.Lease.ExpiresAt)
			}
		default:
			return fmt.Errorf("run: run %s is %s, not claimable", d.RunID, d.Status)
		}
		epoch = 1
		if d.Lease != nil {
			epoch = d.Lease.Epoch + 1
		}
		switch {
		case ours:
			// The earlier claim started or took over the run; this write
			// renews its lease and counts nothing a second time.
			resumed = earlier.resumed
		default:
			resumed = d.Lease != nil
			if resumed {
				d.ResumeCount++
				d.TakenOverAt = &now
			}
		}
		d.Lease = &records.Lease{Owner: r.cfg.Owner, Epoch: epoch, ExpiresAt: now.Add(r.cfg.LeaseDuration)}
		d.LastHeartbeatAt = &now
		tried.leases = append(tried.leases, *d.Lease)
		tried.resumed = resumed
		return nil
	})
	if err != nil {
		if len(tried.leases) > 0 {
			// A write was tried and no answer says it did not land.
			tried.leases = append(tried.leases, earlier.leasesOrNil()...)
			if len(tried.leases) > maxUnsureLeases {
				tried.leases = tried.leases[:maxUnsureLeases] // the newest first
			}
			r.unsure[runID] = tried
		}
		return err
	}
	delete(r.unsure, runID)
	c.w.hold(epoch)
	x.flow, x.epoch, x.resumed = f, epoch, resumed
	x.traceParent = traceParent
	return nil
}

// maxUnsureLeases bounds the leases kept for one run's unsure claims: a
// store that keeps losing answers must not grow them without end.
const maxUnsureLeases = 8

// unsureClaim is a claim that failed after it tried to write its lease
// into the run, so its write may have landed although it never learnt so:
// the store stopped answering until the pass gave up, or the read that
// would have told found another write on top. Nothing of this runner
// executes such a run and its lease is renewed by nobody; a run found
// under one of these leases is this claim's, and the runner takes it up at
// once (the next poll) instead of waiting for the lease to lapse. The
// leases are told apart by owner, epoch and expiry, which only this claim
// wrote, so a process sharing the Owner is not mistaken for it.
type unsureClaim struct {
	leases  []records.Lease
	resumed bool // the claim took the run over from an earlier execution
}

// wrote tells whether l is a lease the claim tried to write.
func (u *unsureClaim) wrote(l *records.Lease) bool {
	if u == nil || l == nil {
		return false
	}
	for _, t := range u.leases {
		if t.Owner == l.Owner && t.Epoch == l.Epoch && t.ExpiresAt.Equal(l.ExpiresAt) {
			return true
		}
	}
	return false
}

func (u *unsureClaim) leasesOrNil() []records.Lease {
	if u == nil {
		return nil
	}
	return u.leases
}

// freeSlotsOf frees every slot of the agent that names runID.
func (r *Runner) freeSlotsOf(ctx context.Context, slug, runID string) {
	a, ok := r.agents[slug]
	if !ok {
		return
	}
	for i := range a.concurrency {
		key, err := layout.RunSlotKey(slug, i)
		if err != nil {
			return
		}
		e, v, err := r.readSlot(ctx, key)
		if err != nil || e.RunID != runID {
			continue
		}
		r.releaseSlot(ctx, slug, key, v)
	}
}

// readSlot reads and validates a slot object; a junk one is quarantined
// and reported as not found, so the slot can be created afresh.
func (r *Runner) readSlot(ctx context.Context, key string) (slotEntry, storage.Version, error) {
	b, v, err := r.store.Get(ctx, key)
	if err != nil {
		return slotEntry{}, "", err
	}
	var e slotEntry
	var ce *records.CorruptError
	if err := json.Unmarshal(b, &e); err != nil {
		ce = &records.CorruptError{Key: key, Version: v, Data: b, Reason: "cannot decode", Err: err}
	} else if e.RunID != "" {
		if err := storage.ValidateID("run id", e.RunID); err != nil {
			ce = &records.CorruptError{Key: key, Version: v, Data: b, Reason: "invalid", Err: err}
		}
	}
	if ce != nil {
		if _, qerr := r.quarantine(ctx, ce); qerr != nil {
			return slotEntry{}, "", qerr
		}
		return slotEntry{}, "", fmt.Errorf("%w: slot %s quarantined", storage.ErrNotFound, key)
	}
	return e, v, nil
}

func (r *Runner) releaseSlotIfOurs(ctx context.Context, x *execution) {
	r.releaseSlot(ctx, x.agent.Slug, x.slotKey, x.slotVer)
}
