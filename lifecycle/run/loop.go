package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// Run executes runs until ctx is done, then waits for the runs it is
// executing to stop and returns nil. Runs cut short by the shutdown keep
// their lease until it lapses; then any runner (this one restarted, with the
// same Owner, at once) takes them over and resumes them from their
// checkpoints. Step goroutines that ignore their context are waited for at
// most ShutdownGrace. Run first recovers the runs that are not terminal (seed 004
// §5.1), then takes work as Submit hands it over and every PollInterval.
func (r *Runner) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrRunnerStarted
	}
	// The loop counts as work on the clock except while it waits below (a
	// test's fake clock moves only when the runner is idle; clock.Activity).
	ctx, end := clock.Enter(ctx, r.cfg.Clock)
	defer end()
	r.mu.Lock()
	r.life = ctx
	r.mu.Unlock()
	defer r.shutdown()
	r.pass(ctx, func(pctx context.Context) { r.poll(pctx, true) })
	// The poll keeps its own schedule: a steady stream of handed runs must
	// not starve it, or orphans and other runners' runs would wait forever.
	t := r.cfg.Clock.NewTimer(r.cfg.PollInterval)
	defer func() { t.Stop() }()
	for {
		// Ready once anything would wake it: a handed run (kept until the
		// loop takes it, so the wake-up is never lost to the count).
		poll := t // t changes once the loop resumes; the ready function may run later
		resume := clock.Wait(ctx, r.cfg.Clock, func() bool { return ctx.Err() != nil || r.hasHanded() || clock.Fired(poll) })
		select {
		case <-ctx.Done():
			resume()
			return nil
		case <-r.wake:
			resume()
			r.pass(ctx, func(pctx context.Context) {
				for _, c := range r.takeHanded() {
					runID := c.w.snapshot().RunID
					r.mu.Lock()
					_, busy := r.executing[runID]
					if busy {
						// Handed over (a Deliver, an Approve) while this
						// runner still ends the run's last execution (it
						// parks): look again when that execution ends.
						r.rehand[runID] = c
					}
					r.mu.Unlock()
					if !busy {
						r.consider(pctx, c, false)
					}
				}
			})
		case <-t.C():
			resume()
			r.pass(ctx, func(pctx context.Context) { r.poll(pctx, false) })
			t = r.cfg.Clock.NewTimer(r.cfg.PollInterval)
		}
	}
}

// pass runs one pass of the loop under PollTimeout (wall-clock), so a
// store that hangs or is down delays the loop by at most that much: the
// pass's store calls wait out transient errors until then and give up, and
// the next pass starts over from the store.
func (r *Runner) pass(ctx context.Context, fn func(context.Context)) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PollTimeout)
	defer cancel()
	fn(pctx)
}

// shutdown waits for this runner's executions to stop, then for abandoned
// step goroutines at most ShutdownGrace (wall-clock).
func (r *Runner) shutdown() {
	r.wg.Wait()
	grace, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownGrace)
	defer cancel()
	if n := r.units.Wait(grace); n > 0 {
		r.log.LogAttrs(context.Background(), slog.LevelWarn, "shutdown_with_stragglers", slog.Int("goroutines", n),
			slog.Duration("grace", r.cfg.ShutdownGrace))
	}
}

// lifeCtx is Run's context: executions live as long as the runner, not as
// long as the pass that started them.
func (r *Runner) lifeCtx() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.life == nil {
		return context.Background()
	}
	return r.life
}

// poll looks at every run not yet terminal, through the active index, and
// then at the runs waiting for a slot. A run it can only watch (executing
// under another runner's live lease, or parked) is not read again until it
// may need this runner: its lease may have lapsed, its external wait's
// deadline passed, or ParkedPollInterval passed. So a poll costs a List and
// a read per run that may move, not a read of every active run.
func (r *Runner) poll(ctx context.Context, startup bool) {
	now := r.now()
	quiet := make(map[string]time.Time, len(r.quiet))
	defer func() { r.quiet = quiet }()
	for key, err := range r.store.List(ctx, layout.RunActivePrefix) {
		if err != nil {
			if ctx.Err() == nil {
				r.log.LogAttrs(ctx, slog.LevelError, "poll_failed", slog.String("error", err.Error()))
			}
			return
		}
		slug, runID, ok := layout.ParseRunActiveKey(key)
		if !ok || r.isExecuting(runID) || r.isWaiting(slug, runID) {
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
			// half-way: finished once it had a lease's time.
			r.finishSubmit(ctx, slug, runID, statusKey)
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
		r.consider(ctx, candidate{slug: slug, w: r.newWriter(slug, runID, statusKey, &doc, ver)}, startup)
		if until := r.quietUntil(r.flowOfDoc(&doc), &doc, now); !until.IsZero() {
			quiet[runID] = until
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
}

// quietUntil is until when a run that consider left alone cannot need
// this runner: the end of another runner's live lease, or for a parked run
// ParkedPollInterval or its external deadline, whichever comes first. Zero
// means it should be read at every poll.
func (r *Runner) quietUntil(f *flow, doc *Status, now time.Time) time.Time {
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
	now := r.now()
	var err error
	if f.terminal(doc.Status) || (doc.Lease == nil && slices.Contains(f.parked, doc.Status)) {
		if !r.repairAudit(ctx, &doc) {
			return
		}
	}
	switch {
	case f.terminal(doc.Status):
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
	x, err := r.claim(ctx, c, reclaimOwn)
	if err != nil {
		r.releaseSlot(ctx, c.slug, slot, slotVer)
		if ctx.Err() == nil {
			r.log.LogAttrs(ctx, slog.LevelInfo, "run_not_claimed", slog.String("runId", runID), slog.String("error", err.Error()))
		}
		return
	}
	x.slotKey, x.slotVer = slot, slotVer
	r.mu.Lock()
	r.executing[runID] = x
	r.mu.Unlock()
	r.wg.Add(1)
	go x.run(clock.Start(r.lifeCtx(), r.cfg.Clock))
}

var errNoSlot = errors.New("run: no free slot")

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
	if errors.Is(err, storage.ErrNotFound) || errors.Is(err, records.ErrCorrupt) {
		return true // gone, or poison and quarantined
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
// A run whose last audit event could not be written keeps its active entry:
// a poll finds it there, writes the event (ensureAudit) and cleans up then.
func (r *Runner) cleanup(ctx context.Context, slug, runID, slot string, slotVer storage.Version) {
	r.releaseSlot(ctx, slug, slot, slotVer)
	if r.auditGap(runID) {
		return
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

// queueExpired tells whether a waiting run outlived QueueTimeout and its
// machine can fail it from there.
func (r *Runner) queueExpired(f *flow, doc Status, now time.Time) bool {
	return r.cfg.QueueTimeout > 0 && now.Sub(doc.StartedAt) > r.cfg.QueueTimeout &&
		f.check(doc.Status, "failed") == nil
}

// claim writes this runner's lease into the run (epoch + 1), starting it if
// it waits for a slot. It fails when any runner holds a live lease (but for
// reclaimOwn: this runner's own lease left by its previous process) or the
// run moved on meanwhile.
func (r *Runner) claim(ctx context.Context, c candidate, reclaimOwn bool) (*execution, error) {
	agent := r.agents[c.slug]
	var f *flow
	var epoch int64
	var resumed bool
	err := c.w.apply(ctx, bySystem(), func(ctx context.Context, d *Status) error {
		now := r.now()
		f = r.flowOfDoc(d)
		switch {
		case d.Status == f.waiting:
			if err := f.fire(ctx, d, f.start, lifecycle.ActorOrchestration); err != nil {
				return err
			}
		case f.executing(d.Status):
			live := d.Lease != nil && !now.After(d.Lease.ExpiresAt)
			if live && !(reclaimOwn && d.Lease.Owner == r.cfg.Owner) {
				return fmt.Errorf("run: run %s is held by %s until %s", d.RunID, d.Lease.Owner, d.Lease.ExpiresAt)
			}
		default:
			return fmt.Errorf("run: run %s is %s, not claimable", d.RunID, d.Status)
		}
		resumed = d.Lease != nil
		epoch = 1
		if d.Lease != nil {
			epoch = d.Lease.Epoch + 1
		}
		if resumed {
			d.ResumeCount++
		}
		d.Lease = &records.Lease{Owner: r.cfg.Owner, Epoch: epoch, ExpiresAt: now.Add(r.cfg.LeaseDuration)}
		d.LastHeartbeatAt = &now
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.w.hold(epoch)
	x := &execution{r: r, agent: agent, flow: f, w: c.w, epoch: epoch, resumed: resumed, records: map[int]StepRecord{}, markers: map[int]storage.Version{},
		input: c.input, inputKnown: c.inputKnown}
	return x, nil
}

func derefTime[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
