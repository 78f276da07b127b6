package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

// claims take a run for this runner: a slot of its agent, then its lease
// written into its status (the claim), then its execution started. They
// remember the claims whose write may have landed although they failed
// (unsure), so a run found under such a lease is taken up at once. Only
// the loop claims, so unsure needs no lock.
type claims struct {
	now      func() time.Time
	log      *slog.Logger
	owner    string        // Config.Owner
	lease    time.Duration // Config.LeaseDuration
	cat      *catalog
	slots    *slots
	execs    *executions
	executor *executor
	unsure   map[string]*unsureClaim // by run id
}

// unsureWrote tells whether l is a lease an unsure claim of the run wrote.
func (cl *claims) unsureWrote(runID string, l *lifecycle.Lease) bool {
	return cl.unsure[runID].wrote(l)
}

// forgetUnsure drops the unsure claims of the runs no longer active.
func (cl *claims) forgetUnsure(active map[string]bool) {
	for runID := range cl.unsure {
		if !active[runID] { // no longer active: nothing to take up
			delete(cl.unsure, runID)
		}
	}
}

// startOrWait takes a slot and the lease and starts executing the run, or
// queues it in memory until a slot frees. takeover is set for an orphan.
func (cl *claims) startOrWait(ctx context.Context, c candidate, takeover bool) {
	doc := c.w.snapshot()
	runID := doc.RunID
	slot, slotVer, err := cl.slots.acquire(ctx, c.slug, runID)
	if errors.Is(err, errNoSlot) {
		cl.slots.wait(c)
		return
	}
	if err != nil {
		cl.log.LogAttrs(ctx, slog.LevelWarn, "slot_failed", slog.String("runId", runID), slog.String("error", err.Error()))
		return
	}
	reclaimOwn := takeover && doc.Lease != nil && doc.Lease.Owner == cl.owner
	// The execution is registered before its claim is written: a Cancel
	// that lands after the claim finds it (and one that lands before is in
	// the claim's snapshot), so no cancel waits for the next heartbeat.
	x := cl.executor.prepare(c, slot, slotVer)
	if !cl.execs.register(runID, x) { // a stale copy of a run this runner already executes
		cl.slots.release(ctx, c.slug, slot, slotVer)
		return
	}
	if err := cl.claim(ctx, c, reclaimOwn, x); err != nil {
		cl.slots.release(ctx, c.slug, slot, slotVer)
		cl.execs.unregister(runID)
		if ctx.Err() == nil {
			cl.log.LogAttrs(ctx, slog.LevelInfo, "run_not_claimed", slog.String("runId", runID), slog.String("error", err.Error()))
		}
		return
	}
	cl.executor.start(x)
}

// claim writes this runner's lease into the run (epoch + 1), starting it if
// it waits for a slot. It fails when any runner holds a live lease (but for
// reclaimOwn: this runner's own lease left by its previous process, and a
// lease an earlier claim of this runner wrote without learning it had) or
// the run moved on meanwhile.
func (cl *claims) claim(ctx context.Context, c candidate, reclaimOwn bool, x *execution) error {
	runID := c.w.runID
	earlier := cl.unsure[runID]
	var f *flow
	var epoch int64
	var resumed bool
	var traceParent string
	tried := &unsureClaim{}
	err := c.w.apply(ctx, bySystem(), func(ctx context.Context, d *Status) error {
		now := cl.now()
		traceParent = d.TraceParent
		f = cl.cat.flowOfDoc(d)
		ours := false // the lease is an earlier claim's of this runner: it landed
		switch {
		case d.Status == f.waiting:
			if err := f.fire(ctx, d, f.start, lifecycle.ActorOrchestration); err != nil {
				return err
			}
		case f.executing(d.Status):
			ours = earlier.wrote(d.Lease)
			live := d.Lease != nil && !now.After(d.Lease.ExpiresAt)
			if live && !ours && !(reclaimOwn && d.Lease.Owner == cl.owner) {
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
		d.Lease = &lifecycle.Lease{Owner: cl.owner, Epoch: epoch, ExpiresAt: now.Add(cl.lease)}
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
			cl.unsure[runID] = tried
		}
		return err
	}
	delete(cl.unsure, runID)
	c.w.hold(epoch)
	x.flow, x.epoch, x.resumed = f, epoch, resumed
	x.traceParent = traceParent
	return nil
}

// wrote tells whether l is a lease the claim tried to write.
func (u *unsureClaim) wrote(l *lifecycle.Lease) bool {
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

func (u *unsureClaim) leasesOrNil() []lifecycle.Lease {
	if u == nil {
		return nil
	}
	return u.leases
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
	leases  []lifecycle.Lease
	resumed bool // the claim took the run over from an earlier execution
}
