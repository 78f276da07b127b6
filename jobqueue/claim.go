package jobqueue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// claimTries bounds the agents one Claim looks at, so a call costs O(1)
// store calls however many agents are due; the rest wait for the next call.
const claimTries = 16

// claimer finds ready work and picks it up under the agent's lock: the
// schedule of agents, their lanes and locks, the repairs a lock or a lane
// entry calls for on the way, and the pickup write.
type claimer struct {
	store    *storage.Store
	clock    clock.Clock
	leaseTTL time.Duration
	grace    stopGrace
	sched    *scheduler
	lanes    *lanes
	locks    *locks
	jobs     *jobStore
	repair   *repairer
	retries  *retries
	audit    *auditor
	twice    *twiceCheck
	runner   *runner // what the Claims it makes run with
	caps     *caps   // the configured concurrency
	pauses   *pauses // the paused queues
}

// claimFor is Claim for a Worker that knows its handlers: noAssembly tells
// whether the handlers that will run a job of the type assemble no context,
// and for such a job the pickup moves on through CONTEXT_ASSEMBLY to
// NOTEBOOKLM_CALL in the same write (the snapshot is ready at once, empty),
// saving the job a write. nil: Claim's behaviour, the job stops in
// CONTEXT_ASSEMBLY.
func (q *claimer) claimFor(ctx context.Context, worker string, noAssembly func(lifecycle.JobType) bool) (*Claim, error) {
	if err := storekey.ValidateID("worker id", worker); err != nil {
		return nil, err
	}
	if err := q.locks.refreshAgents(ctx); err != nil {
		return nil, err
	}
	if err := q.lanes.refreshLanes(ctx); err != nil {
		return nil, err
	}
	if err := q.pauses.refresh(ctx); err != nil {
		return nil, err
	}
	var firstErr error
	for range claimTries {
		now := q.clock.Now()
		a := q.sched.take(now)
		if a == nil {
			break
		}
		if q.pauses.isPaused(laneQueue(a.name)) {
			// Looked at again at the next listing of the pauses, or at
			// once when this process resumes the queue.
			q.sched.putBack(a, now.Add(pauseRefresh))
			continue
		}
		if !q.caps.tryStart(a) {
			// Full in this process: looked at again when a claim
			// counted against the full cap ends (caps.ended). Counted
			// otherwise while it is tried: other lanes' claims see it.
			q.sched.putBack(a, now.Add(q.leaseTTL))
			continue
		}
		c, next, err := q.claimAgent(ctx, worker, a, now, noAssembly)
		if c != nil {
			a.mu.Lock()
			c.counted, c.slot.running = true, true
			a.mu.Unlock()
			// Looked at again when the claim ends, or when its lease
			// would have run out if it never ends; a lane with a lock
			// to spare, at once.
			again := now.Add(q.leaseTTL)
			if q.caps.slotsOf(a.name) > 1 {
				again = now
			}
			q.sched.putBack(a, again)
			return c, nil
		}
		q.caps.ended(a, now)
		if err == nil {
			q.sched.putBack(a, next)
			continue
		}
		q.sched.putBack(a, now.Add(laneRecheck)) // do not retry a failing agent at once
		if ctx.Err() != nil {
			return nil, err
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

var (
	errStale    = errors.New("stale lane entry")
	errNotReady = errors.New("not ready")
)

// claimAgent tries to pick up the next ready job of a, and says when a is
// next worth a look if it picks none up. It reads the agent's lock only
// when the lane has a ready job, or at most twice per lease lifetime to
// find an orphan, so idle agents cost no store calls between lane listings.
// Its steps, in order: look at the lane and read the lock (probeAgent),
// settle or find the job the lock names (lockedOrphan), take the lock and
// rescue that job (takeLock), pick up the lane's head (pickupHead).
func (q *claimer) claimAgent(ctx context.Context, worker string, a *agentState, now time.Time, noAssembly func(lifecycle.JobType) bool) (*Claim, time.Time, error) {
	s := &agentClaim{worker: worker, a: a, now: now, noAssembly: noAssembly}
	if next, done, err := q.probeAgent(ctx, s); done {
		return nil, next, err
	}
	orphan, next, done, err := q.lockedOrphan(ctx, s)
	if done {
		return nil, next, err
	}
	c, next, done, err := q.takeLock(ctx, s, orphan)
	if done {
		return nil, next, err
	}
	return q.pickupHead(ctx, s, c)
}

// agentClaim is what the steps of one claimAgent share.
type agentClaim struct {
	worker     string
	a          *agentState
	now        time.Time
	noAssembly func(lifecycle.JobType) bool

	slot    *lockSlot // the lane's lock the claim takes (pickSlot)
	lockKey string    // its key
	head    string    // the lane's first key at the look, "" if none
	ready   bool      // head is due (or malformed)
	lockAt  time.Time
	lock    agentLock
	lockVer storage.Version
	cached  bool // lock came from this Queue's cache (agentState.keep)
}

// probeAgent looks at a's lane head and, when it is ready or an orphan
// check is due, reads the agent's lock into s. done: claimAgent returns
// next and err.
func (q *claimer) probeAgent(ctx context.Context, s *agentClaim) (next time.Time, done bool, err error) {
	a, now := s.a, s.now
	head, err := q.lanes.head(ctx, a, false)
	if err != nil {
		return time.Time{}, true, err
	}
	s.head = head
	ready := false
	if head != "" {
		at, _, ok := parseLaneKey(head)
		ready = !ok || !at.After(now) // a malformed key is cleaned up below
	}
	s.ready = ready
	slot, busy := a.pickSlot(q.caps.slotsOf(a.name), now, ready)
	if slot == nil {
		if busy.IsZero() {
			busy = now.Add(q.leaseTTL) // every lock held here: looked at when a claim ends
		}
		return busy, true, nil
	}
	s.slot = slot
	lockKey, err := layout.SlotLockKey(a.name, slot.k)
	if err != nil {
		return now.Add(time.Hour), true, err
	}
	s.lockKey = lockKey
	a.mu.Lock()
	busyUntil := slot.busyUntil
	a.mu.Unlock()
	if ready && now.Before(busyUntil) {
		return busyUntil, true, nil // its lock was held a moment ago
	}
	due, lockAt := a.lockCheckDue(slot, now, q.leaseTTL/2)
	s.lockAt = lockAt
	if !ready && !due {
		return a.idleUntil(lockAt), true, nil
	}
	s.lock, s.lockVer, s.cached, err = q.locks.readLock(ctx, a, slot, lockKey)
	if errors.Is(err, storage.ErrNotFound) && slot.k > 0 && ready {
		// A lock of the lane not yet made: made now, and taken.
		s.lock, s.lockVer, err = q.locks.makeSlot(ctx, a, slot, lockKey)
	}
	if errors.Is(err, storage.ErrNotFound) {
		if head != "" && slot.k == 0 {
			q.locks.remakeMissing(ctx, a, slot, lockKey) // lost by the store: no claim could take the lane
		}
		return now.Add(laneRecheck), true, nil
	}
	if err != nil {
		return time.Time{}, true, err
	}
	return time.Time{}, false, nil
}

// lockedOrphan decides, from the lock probeAgent read, whether the lock can
// be taken, and returns the job it names that is still to be rescued under
// the new epoch ("" if none). done: claimAgent returns next and err.
func (q *claimer) lockedOrphan(ctx context.Context, s *agentClaim) (orphan string, next time.Time, done bool, err error) {
	a, now, ready, lockAt := s.a, s.now, s.ready, s.lockAt
	lock := &s.lock
	// kept: a lock this Queue's last claim of the agent kept past its end,
	// its job settled (Claim.end). ended: the job a lock held by another
	// process (or an earlier life of this one) names ended its run under
	// the lock's epoch, so the lock was kept, not released; its claim may
	// not have settled the job (laned it, buried it, flushed its audit)
	// before it stopped, so this claim settles it before the lock names
	// another job (repair.go).
	kept := s.cached && lock.Owner != ""
	var named *jobDoc // the job the lock names, read: ended, or the lock free
	if !kept && ready && !lock.free(now) && lock.JobID != "" {
		d, ended, err := q.lockEnded(ctx, lock, s.slot.k)
		if err != nil {
			return "", time.Time{}, true, err
		}
		if ended {
			named = &d
		}
	}
	if !ready && kept && s.cached {
		a.keep(s.slot, lock, s.lockVer) // not taken now: the next claim still may without reading
	}
	if !kept && named == nil && !lock.free(now) {
		until := now.Add(min(q.leaseTTL/4, time.Second))
		a.mu.Lock()
		s.slot.busyUntil = until
		a.mu.Unlock()
		if !ready {
			return "", minTime(a.idleUntil(lockAt), lock.ExpiresAt), true, nil
		}
		return "", until, true, nil
	}
	orphan = lock.JobID
	if kept {
		orphan = "" // its job's run ended and its claim settled it
	}
	if orphan != "" && ready {
		if orphan, err = q.settleNamed(ctx, orphan, named, s.slot.k); errors.Is(err, errUnsettled) {
			return "", now.Add(laneRecheck), true, nil // the lock goes on naming it
		} else if err != nil {
			return "", time.Time{}, true, err
		}
	}
	if !ready && orphan == "" {
		return "", a.idleUntil(lockAt), true, nil
	}
	return orphan, time.Time{}, false, nil
}

// settleNamed handles the job a free or kept lock names (named, if already
// read): one out of its pipeline is settled here, before the lock is taken,
// so the take can name the next job in the same write; one in a pipeline
// state is rescued under the new epoch (takeLock). It returns the orphan
// still to be rescued, "" if none.
func (q *claimer) settleNamed(ctx context.Context, orphan string, named *jobDoc, slot int) (string, error) {
	if named == nil {
		d, _, err := q.jobs.read(ctx, orphan)
		switch {
		case err == nil:
			named = &d
		case q.jobs.gone(orphan, err):
			orphan = "" // gone (its Enqueue undone, or quarantined): nothing to repair
		case errors.Is(err, storage.ErrNotFound):
			return "", errUnsettled
		default:
			return "", err
		}
	}
	if named != nil && elsewhere(named, slot) {
		return "", nil // run under another lock of the lane, which names it
	}
	if named != nil && !pipelineState(named.Status) {
		if err := q.repair.settle(ctx, named); err != nil {
			return "", err // the lock goes on naming it
		}
		orphan = ""
	}
	return orphan, nil
}

// takeLock takes the agent lock with a new epoch, the fencing token of
// whatever job this claim runs or rescues, and rescues orphan under it.
// done: claimAgent returns next and err.
func (q *claimer) takeLock(ctx context.Context, s *agentClaim, orphan string) (c *Claim, next time.Time, done bool, err error) {
	now, lock := s.now, &s.lock
	read := *lock
	lock.Owner, lock.Epoch, lock.ExpiresAt = s.worker, lock.Epoch+1, now.Add(q.leaseTTL)
	if orphan == "" {
		// Name the job about to be picked up in the same write; with an
		// orphan, the lock keeps naming it until it is rescued.
		_, lock.JobID, _ = parseLaneKey(s.head)
	}
	c = &Claim{r: q.runner, worker: s.worker, epoch: lock.Epoch, agent: s.a, slot: s.slot, noAssembly: s.noAssembly}
	if orphan == "" && q.store.CanCommit() {
		// The take is written with the pickup, in its commit (pickup).
		c.lockVer, c.untaken = s.lockVer, true
		if s.cached {
			c.asRead = &read
		}
		return c, time.Time{}, false, nil
	}
	if s.lockVer, err = q.locks.writeLock(ctx, s.lockKey, lock, s.lockVer); err != nil {
		next, done := q.takeRefused(s)
		if !done {
			return nil, time.Time{}, true, err
		}
		return nil, next, true, nil
	}
	c.lockVer, c.lockMeta = s.lockVer, lock.Meta
	if orphan != "" {
		c.named = orphan // a failed repair leaves the lock naming it (repair.go)
		if err := q.repair.repairOrphan(ctx, orphan, c.epoch, s.slot.k); err != nil && !q.jobs.gone(orphan, err) {
			c.release(ctx) // still naming it
			if errors.Is(err, storage.ErrNotFound) {
				return nil, now.Add(laneRecheck), true, nil // read missing, not yet gone
			}
			return nil, time.Time{}, true, err
		}
		if q.audit.hasAuditGap(orphan) {
			c.release(ctx) // its audit object is still to be written: named on
			return nil, now.Add(laneRecheck), true, nil
		}
		c.named = ""
	}
	return c, time.Time{}, false, nil
}

// takeRefused is when to look at the agent again after the take of its
// lock was refused (done false: not a refusal, the take's error stands).
func (q *claimer) takeRefused(s *agentClaim) (next time.Time, done bool) {
	if s.cached {
		return s.now, true // the lock changed since this Queue freed it: read it and try again
	}
	return s.now.Add(min(q.leaseTTL/4, time.Second)), true // another worker took it first
}

// holdLock writes the take of the agent lock that c left to the pickup's
// commit (Claim.untaken), naming the job s.lock names, for a repair that
// needs the lock held before its write. done: claimAgent returns next and
// err.
func (q *claimer) holdLock(ctx context.Context, s *agentClaim, c *Claim) (next time.Time, done bool, err error) {
	if !c.untaken {
		return time.Time{}, false, nil
	}
	ver, err := q.locks.writeLock(ctx, s.lockKey, &s.lock, c.lockVer)
	if errors.Is(err, storage.ErrPreconditionFailed) {
		c.asRead = nil // the lock changed since it was read: not put back
		c.release(ctx)
		next, _ := q.takeRefused(s)
		return next, true, nil
	}
	if err != nil {
		c.release(ctx) // nothing written: the lock as read goes back to the cache
		return time.Time{}, true, err
	}
	c.lockVer, c.lockMeta, c.untaken, c.asRead = ver, s.lock.Meta, false, nil
	return time.Time{}, false, nil
}

// pickupHead, under the lock c holds, picks up the first ready job of the
// lane, dropping stale and dead entries on the way (at most 64).
func (q *claimer) pickupHead(ctx context.Context, s *agentClaim, c *Claim) (*Claim, time.Time, error) {
	a := s.a
	pending := "" // a lane entry whose job may still be being written (lanePending)
	for range 64 {
		key, err := q.lanes.head(ctx, a, true)
		if err != nil || key == "" {
			c.release(ctx)
			return nil, a.idleUntil(s.lockAt), err
		}
		at, jobID, ok := parseLaneKey(key)
		if !ok {
			q.lanes.deleteLane(ctx, a, key)
			continue
		}
		if at.After(q.clock.Now()) {
			c.release(ctx)
			return nil, a.idleUntil(s.lockAt), nil
		}
		if got, next, done, err := q.pickupEntry(ctx, s, c, key, jobID, &pending); done {
			return got, next, err
		}
	}
	c.release(ctx)
	return nil, s.now, nil // 64 stale or dead entries: more may follow
}

// pickupEntry tries to pick up jobID of the lane entry key. done: the
// claim ends with got, next and err; otherwise pickupHead goes on with the
// next entry.
func (q *claimer) pickupEntry(ctx context.Context, s *agentClaim, c *Claim, key, jobID string, pending *string) (got *Claim, next time.Time, done bool, err error) {
	a, now, lock := s.a, s.now, &s.lock
	joint := q.store.CanCommit() // the lock's write and the entry's delete go with the pickup's
	if lock.JobID != jobID {
		lock.JobID = jobID
		if !joint {
			if c.lockVer, err = q.locks.writeLock(ctx, s.lockKey, lock, c.lockVer); err != nil {
				a.forget()
				return nil, time.Time{}, true, err // lost the lock: nothing of ours to release
			}
			c.lockMeta = lock.Meta
		}
	}
	c.named = jobID // until the job is settled (repair.go)
	var doc jobDoc
	var ver storage.Version
	var picked bool
	if joint {
		doc, ver, picked, err = q.pickupJoint(ctx, s, c, key, jobID)
	} else {
		doc, ver, picked, _, err = q.pickup(ctx, key, jobID, c, nil)
	}
	switch {
	case errors.Is(err, errLockRefused):
		a.forget()
		if c.untaken {
			c.asRead = nil // the lock changed since it was read: not put back
			c.release(ctx)
			next, _ := q.takeRefused(s)
			return nil, next, true, nil
		}
		return nil, now, true, nil // lost the lock: nothing of ours to release
	case errors.Is(err, errNotReady):
		a.forget()
		c.named = ""
		c.release(ctx)
		return nil, now.Add(laneRecheck), true, nil
	case errors.Is(err, errStale), errors.Is(err, storage.ErrNotFound):
		next, done, err := q.dropStale(ctx, s, c, key, err, pending)
		return nil, next, done, err
	case err != nil:
		c.release(ctx)
		return nil, time.Time{}, true, err
	}
	if picked {
		if twice, err := q.twice.createdTwice(ctx, &doc); err != nil || twice {
			return q.dropTwice(ctx, s, c, key, jobID, err)
		}
		c.job, c.doc, c.ver = doc.Job, doc, ver
		if joint {
			return c, time.Time{}, true, nil // the lock and the entry's delete went with it
		}
		// The entry goes only once the pickup is confirmed: until then
		// it may be all that points at the job (confirmPickup).
		err := q.confirmPickup(ctx, c, s.lockKey, lock)
		if err == nil || errors.Is(err, errLockLost) {
			q.lanes.deleteLane(ctx, a, key)
		}
		if err != nil {
			a.forget()
			if errors.Is(err, errLockLost) {
				return nil, now, true, nil // the job is back in its lane; look again
			}
			return nil, time.Time{}, true, err
		}
		return c, time.Time{}, true, nil
	}
	if !joint {
		q.lanes.deleteLane(ctx, a, key)
	}
	// The job's attempts ran out: it went to FAILED and DEAD; next,
	// unless its audit object is still to be written (repair.go).
	if q.audit.hasAuditGap(jobID) {
		c.release(ctx)
		return nil, now.Add(laneRecheck), true, nil
	}
	c.named = ""
	return nil, time.Time{}, false, nil
}

// dropStale handles a lane entry whose job another process took (pickErr
// is errStale or storage.ErrNotFound). done: the claim ends with next and
// err; otherwise pickupHead goes on with the next entry.
func (q *claimer) dropStale(ctx context.Context, s *agentClaim, c *Claim, key string, pickErr error, pending *string) (next time.Time, done bool, err error) {
	a := s.a
	// Another process took it: the cache is out of date, so list
	// the lane afresh rather than try its other entries one by one.
	a.forget()
	var se *staleEntry
	now := q.clock.Now()
	// Picked up under another lock of the lane, whose claim deletes the
	// entry once its pickup is confirmed: left alone like a pending one,
	// not rescued while its lease runs (elsewhere).
	picked := errors.As(pickErr, &se) && elsewhere(&se.doc, s.slot.k) && now.Before(se.doc.Lease.ExpiresAt)
	if picked || q.repair.pendingAfter(key, pickErr, now) {
		// Written moments ago by an Enqueue or Requeue that writes
		// its job next: left alone (repair.go).
		c.named = ""
		if key == *pending {
			c.release(ctx)
			return s.now.Add(pendingRecheck), true, nil
		}
		*pending = key
		return time.Time{}, false, nil
	}
	// The entry may be all that still points at its job: repaired
	// while the lock names the job, before the entry goes.
	if se != nil {
		if next, done, err := q.holdLock(ctx, s, c); done {
			return next, true, err
		}
		if err := q.repair.repairStale(ctx, key, se, c.epoch); err != nil {
			c.release(ctx) // still naming the job
			return time.Time{}, true, err
		}
	}
	c.named = ""
	q.lanes.deleteLane(ctx, a, key)
	return time.Time{}, false, nil
}

// errLockLost: the agent lock was taken over before the claim's pickup
// landed (confirmPickup).
var errLockLost = errors.New("jobqueue: agent lock lost before the pickup")

// confirmPickup makes sure the agent lock was still the claim's when the
// pickup's write landed, and stays so. The pickup is a compare-and-swap on
// the job, not on the lock: a claim paused past the lock's expiry between
// its take and its pickup may find the lock taken by another process that
// named another job, and its pickup then leaves the job in a pipeline state
// in no lane and named by no lock, out of reach of every claim and of the
// sweep (repair.go). Reading the lock after the pickup is not enough: a
// taker may have read the lapsed lock, and the job before the pickup
// (nothing to rescue), and not yet written its take, which then lands on
// the version the claim just read (TestTakeLandsAfterPickupConfirmed). So
// while the lock's expiry is certainly ahead (no other process takes a lock
// before it expires) nothing is done; otherwise the lock is renewed by a
// compare-and-swap on the version the claim wrote, which fails any take
// still to land. If the lock changed since, it was lost: the job is rescued
// back to its lane (a failed attempt, as for any claim that lost its lease)
// under an epoch newer than the claim's, and errLockLost is returned. If
// the store fails, the claim releases the lock still naming the job (lost
// already, the release changes nothing). On a store that commits, the
// pickup's commit carries the lock's condition (pickupJoint): not called.
func (q *claimer) confirmPickup(ctx context.Context, c *Claim, lockKey string, lock *agentLock) error {
	if fence.LeaseCertain(lock.ExpiresAt, q.clock.Now(), q.leaseTTL) {
		return nil
	}
	renewed := *lock
	renewed.ExpiresAt = q.clock.Now().Add(q.leaseTTL)
	ver, err := q.locks.writeLock(ctx, lockKey, &renewed, c.lockVer)
	switch {
	case err == nil:
		c.lockVer, c.lockMeta, lock.ExpiresAt, lock.Meta = ver, renewed.Meta, renewed.ExpiresAt, renewed.Meta
		return nil // held since the take, naming the job: any later taker repairs it
	case !errors.Is(err, storage.ErrPreconditionFailed):
		c.release(ctx) // c.named is the job
		return err
	}
	epoch := c.epoch + 1
	rec := &fence.Record[agentLock, *agentLock]{Store: q.store, Key: lockKey}
	if cur, _, err := rec.Load(ctx); err == nil && cur.Epoch > c.epoch {
		epoch = cur.Epoch
	}
	rctx, cancel := q.grace.after(ctx)
	defer cancel()
	if err := q.retries.rescue(rctx, c.job.JobID, epoch); err != nil {
		return err
	}
	return errLockLost
}

// pickup moves the job of lane entry key on: by pickup, QUEUED →
// CONTEXT_ASSEMBLY (the spec's machine) or QUEUED → RUNNING (the general
// one: the job's machine says, jobMachineOf) with the claim's lease and
// attempt+1, or from RETRY_BACKOFF through backoff_elapsed to QUEUED and
// on, or to FAILED (attempts exhausted) and then DEAD. picked tells
// whether the claim now runs the job.
//
// joint, when not nil, gives the writes committed with the pickup's, all
// or none (pickupJoint); vers are their versions.
func (q *claimer) pickup(ctx context.Context, key, jobID string, c *Claim, joint func(d *jobDoc) ([]storage.Write, error)) (_ jobDoc, _ storage.Version, picked bool, vers []storage.Version, _ error) {
	orch := lifecycle.ActorOrchestration
	doc, ver, vers, err := q.jobs.updateJoint(ctx, jobID, nil, "", "", 0, func(d *jobDoc, now time.Time) error {
		if d.ReadyKey != key || (d.Status != lifecycle.JobQueued && d.Status != lifecycle.JobRetryBackoff) {
			return &staleEntry{doc: *d}
		}
		if d.Status == lifecycle.JobRetryBackoff {
			if d.NextAttemptAt != nil && d.NextAttemptAt.After(now) {
				return errNotReady
			}
			if err := fire(ctx, d, machine.EventBackoffElapsed, orch); err != nil {
				return err
			}
			d.NextAttemptAt = nil
			if d.Status == lifecycle.JobFailed {
				d.ReadyKey = ""
				return nil
			}
			d.QueuedAt = &now
		}
		if err := fire(ctx, d, machine.EventPickup, orch); err != nil {
			return err
		}
		d.Attempt++
		d.ReadyKey = ""
		d.Lease = &lifecycle.Lease{Owner: c.worker, Epoch: c.epoch, ExpiresAt: now.Add(q.leaseTTL), Slot: c.slot.k}
		if c.noAssembly != nil && c.noAssembly(d.JobType) && d.Status == lifecycle.JobContextAssembly {
			return fire(ctx, d, machine.EventSnapshotReady, orch)
		}
		return nil
	}, joint)
	if err != nil {
		return jobDoc{}, "", false, nil, err
	}
	if doc.Status == lifecycle.JobFailed {
		_, err := q.retries.bury(ctx, jobID, &doc, ver)
		return jobDoc{}, "", false, vers, err
	}
	return doc, ver, true, vers, nil
}

// errLockRefused: a joint pickup's commit was refused by the agent lock's
// condition: another claim took the lock since it was read (pickupJoint).
var errLockRefused = errors.New("jobqueue: agent lock changed before the pickup's commit")

// pickupJoint is pickup on a store that commits: the job's pickup, the
// agent lock's write (the take, or the lock renamed to the job; its expiry
// the job's lease's) and the lane entry's delete land in one commit,
// conditioned on the lock's version, or none does. So the pickup lands
// only while the lock is the claim's, naming the job, and no state between
// two of those writes exists (repair.go): nothing is left to confirm
// (confirmPickup). A refusal by the lock's condition is errLockRefused.
func (q *claimer) pickupJoint(ctx context.Context, s *agentClaim, c *Claim, key, jobID string) (jobDoc, storage.Version, bool, error) {
	var (
		next   agentLock
		landed func() // the entry's note in the lane cache (lanes.deleting)
	)
	defer func() {
		if landed != nil {
			landed()
		}
	}()
	joint := func(d *jobDoc) ([]storage.Write, error) {
		l := s.lock
		if d.Lease != nil {
			l.ExpiresAt = d.Lease.ExpiresAt
		}
		lw, n, err := lockWrite(s.lockKey, &l, c.lockVer)
		if err != nil {
			return nil, err
		}
		if landed == nil {
			landed = q.lanes.deleting(s.a, key)
		}
		next = n
		return []storage.Write{lw, {Key: key, Delete: true}}, nil
	}
	// The entry's delete is this Queue's own: its cache drops the entry
	// (deleting), so its watch need not wake for it.
	doc, ver, picked, vers, err := q.pickup(q.lanes.mine(ctx), key, jobID, c, joint)
	q.lanes.wroteMine(err)
	if vers != nil {
		// Landed (a bury that followed may have failed: err).
		s.lock, c.lockMeta, c.untaken, c.asRead = next, next.Meta, false, nil
		if c.lockVer = vers[0]; c.lockVer == "" {
			// Its commit's outcome was unknown; it landed, and the lock
			// changed since: taken by another claim, which repairs the
			// job the lock named.
			return jobDoc{}, "", false, errLockRefused
		}
	}
	if err != nil {
		if refusedAt(err, s.lockKey) {
			return jobDoc{}, "", false, errLockRefused
		}
		return jobDoc{}, "", false, err
	}
	return doc, ver, picked, nil
}

// refusedAt tells whether err is a refused condition of the write at key.
func refusedAt(err error, key string) bool {
	oe, ok := errors.AsType[*storage.OpError](err)
	return ok && errors.Is(err, storage.ErrPreconditionFailed) && oe.Key == key
}

// lockEnded tells whether the job a held lock names ended its run under
// the lock's epoch (ran_epoch), so the lock, kept rather than released by
// its last claim, is free; d is the job as read.
func (q *claimer) lockEnded(ctx context.Context, l *agentLock, slot int) (d jobDoc, ended bool, err error) {
	d, _, err = q.jobs.read(ctx, l.JobID)
	if errors.Is(err, storage.ErrNotFound) {
		return d, false, nil
	}
	if err != nil {
		return d, false, err
	}
	return d, d.RanEpoch >= l.Epoch && !pipelineState(d.Status) || elsewhere(&d, slot), nil
}

// elsewhere tells whether d runs under another lock of its lane than
// slot's: a lock names the last job it ran until it runs another, and that
// job may since have been picked up again (a retry) under another lock of
// a lane of several. Such a job is that lock's to settle, not an orphan
// of this one's: it must not be rescued (docs/design.md#jobs). A job whose
// lease names no slot ran under slot 0 (every job of an agent's lane, and
// of the releases before slots).
func elsewhere(d *jobDoc, slot int) bool {
	return pipelineState(d.Status) && d.Lease != nil && d.Lease.Slot != slot
}

// dropTwice ends the pickup of a job createdTwice found (twiceErr: it
// could not tell): the job is quarantined and its entry deleted, and the
// claim goes on with the next entry; or, when that fails, the lock is
// released still naming the job, rescued after its lease like any orphan
// and checked again at its next pickup.
func (q *claimer) dropTwice(ctx context.Context, s *agentClaim, c *Claim, key, jobID string, twiceErr error) (*Claim, time.Time, bool, error) {
	if twiceErr == nil {
		twiceErr = q.twice.quarantineTwice(ctx, jobID)
	}
	if twiceErr != nil {
		c.release(ctx)
		return nil, time.Time{}, true, twiceErr
	}
	q.lanes.deleteLane(ctx, s.a, key)
	c.named = ""
	return nil, time.Time{}, false, nil
}

// Claim is one job a worker has picked up: the job is in CONTEXT_ASSEMBLY
// (RUNNING for a job of the general machine) with the worker's lease, and the worker holds its agent's lock. Run it,
// or Abandon it.
type Claim struct {
	r      *runner
	worker string
	epoch  int64
	agent  *agentState
	slot   *lockSlot // the lane's lock the claim holds
	// counted: the claim counts against the configured caps until it
	// ends (caps.ended, once).
	counted bool
	// noAssembly: see claimer.claimFor.
	noAssembly func(lifecycle.JobType) bool

	mu      sync.Mutex // serializes the pipeline's and the heartbeat's writes
	job     lifecycle.Job
	doc     jobDoc          // the job as this claim last wrote it
	ver     storage.Version // its store version
	lockVer storage.Version
	// lockMeta is the agent lock's lifecycle.Meta as the claim last wrote
	// it (its counter, and the members of a newer release it keeps):
	// every write of the lock carries it on.
	lockMeta lifecycle.Meta
	done     bool
	// artCreated is the artifact this claim created, its creation event
	// still to be written with the job's (artifact.Draft.Audited).
	artCreated string
	// named is the job the agent lock must go on naming when the claim
	// releases it: the job the claim picked up until it settles it
	// (repair.go), so a claim that lost its lease or its store leaves the
	// job findable by the next claim and the sweep.
	named string
	// renewedAt is when the claim last renewed its lease (Unix ns); the
	// heartbeat is scheduled from it. Atomic, not under mu: a write that
	// waits out a store outage holds mu, and the heartbeat must still be
	// able to schedule itself meanwhile.
	renewedAt atomic.Int64
	// untaken: the claim's take of the agent lock is still to be written,
	// with its pickup, in one commit (pickupJoint); lockVer is the version
	// read, and a release writes nothing. asRead is the lock as this
	// Queue's cache held it, put back by such a release.
	untaken bool
	asRead  *agentLock
	// worked, when set (by a Worker's slot), fires once the job's
	// handler has returned, before the job's end is written: the slot
	// may claim its next job while this one's end commits (Worker.loop).
	worked onWorked
}

// onWorked is a Worker slot's wish to hear that a claim's handler is
// done with: only the job's end is left to write. It fires at most once,
// from the goroutine that runs the claim.
type onWorked func()

func (f *onWorked) fire() {
	if g := *f; g != nil {
		*f = nil
		g()
	}
}

// Job is the job as claimed (or as last written by the claim).
func (c *Claim) Job() lifecycle.Job {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.job
}
