package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// laneBatch is how many lane keys one List reads (one S3 page): claiming
// costs one List per laneBatch jobs of an agent, so finding work is O(1)
// store calls amortized, never a scan of the jobs.
const laneBatch = 1000

// claimTries bounds the agents one Claim looks at, so a call costs O(1)
// store calls however many agents are due; the rest wait for the next call.
const claimTries = 16

// Claim finds a ready job of an agent whose lock is free and picks it up
// for worker, or returns nil when there is none. On the way it rescues the
// orphan of an expired lock and moves on the jobs whose backoff ran out.
// worker must be unique among the workers sharing the store.
//
// The Queue keeps its agents in order of when each is next worth a look
// (its lane's head is ready, its lock is due an orphan check, a lock seen
// held may be free), so a Claim looks only at agents that are due.
func (q *Queue) Claim(ctx context.Context, worker string) (*Claim, error) {
	return q.claimFor(ctx, worker, nil)
}

// claimFor is Claim for a Worker that knows its handlers: noAssembly tells
// whether the handlers that will run a job of the type assemble no context,
// and for such a job the pickup moves on through CONTEXT_ASSEMBLY to
// NOTEBOOKLM_CALL in the same write (the snapshot is ready at once, empty),
// saving the job a write. nil: Claim's behaviour, the job stops in
// CONTEXT_ASSEMBLY.
func (q *Queue) claimFor(ctx context.Context, worker string, noAssembly func(lifecycle.JobType) bool) (*Claim, error) {
	if err := storage.ValidateID("worker id", worker); err != nil {
		return nil, err
	}
	if err := q.refreshAgents(ctx); err != nil {
		return nil, err
	}
	if err := q.refreshLanes(ctx); err != nil {
		return nil, err
	}
	var firstErr error
	for range claimTries {
		now := q.clock.Now()
		a := q.take(now)
		if a == nil {
			break
		}
		c, next, err := q.claimAgent(ctx, worker, a, now, noAssembly)
		if c != nil {
			// Looked at again when the claim ends, or when its lease
			// would have run out if it never ends.
			q.putBack(a, now.Add(q.cfg.LeaseTTL))
			return c, nil
		}
		if err == nil {
			q.putBack(a, next)
			continue
		}
		q.putBack(a, now.Add(laneRecheck)) // do not retry a failing agent at once
		if ctx.Err() != nil {
			return nil, err
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

// refreshAgents lists the agents with a lock object, at most once per
// second, so that agents other processes enqueued for are looked at
// (agents this Queue enqueued for are known at once).
func (q *Queue) refreshAgents(ctx context.Context) error {
	now := q.clock.Now()
	q.mu.Lock()
	fresh := !q.agentAt.IsZero() && now.Sub(q.agentAt) < time.Second && now.After(q.agentAt.Add(-time.Second))
	if !fresh {
		q.agentAt = now
	}
	q.mu.Unlock()
	if fresh {
		return nil
	}
	for key, err := range q.store.List(ctx, agentPrefix) {
		if err != nil {
			return err
		}
		if name, ok := layout.AgentFromLockKey(key); ok {
			a := q.agent(name)
			a.mu.Lock()
			a.lockExists = true
			a.mu.Unlock()
		}
	}
	return nil
}

// laneRecheck is how long an agent's lane, listed empty, is taken to stay
// empty; it doubles with every empty listing in a row, up to
// laneRecheck<<maxIdleShift (3.2 s). Jobs other processes enqueue for an
// idle agent are found within that delay; this Queue's own enqueues and
// retries are found at once.
const (
	laneRecheck  = 200 * time.Millisecond
	maxIdleShift = 4
)

// recheckAt is when a's lane, as last listed, is worth listing again.
// a.mu must be held.
func (a *agentState) recheckAt() time.Time {
	return a.listedAt.Add(laneRecheck << min(a.idle, maxIdleShift))
}

// head returns the first lane key of a. It lists the lane (laneBatch
// keys) when the cache is empty, or when the cached head is not ready yet,
// unless the last listing is less than laneRecheck old; force lists an
// empty cache regardless. It does not remove the key.
func (q *Queue) head(ctx context.Context, a *agentState, force bool) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := q.clock.Now()
	fresh := !a.listedAt.IsZero() && now.Before(a.recheckAt()) && !now.Before(a.listedAt)
	if len(a.keys) > 0 {
		at, _, ok := parseLaneKey(a.keys[0])
		if !ok || !at.After(now) || fresh {
			return a.keys[0], nil
		}
	} else if fresh && a.complete && !force {
		return "", nil // listed whole and used up less than laneRecheck ago
	}
	prefix, err := layout.LanePrefix(a.name)
	if err != nil {
		return "", err
	}
	gen := q.listGen.Add(1)
	var keys []string
	for key, err := range q.store.List(ctx, prefix) {
		if err != nil {
			return "", err
		}
		keys = append(keys, key)
		if len(keys) == laneBatch {
			break
		}
	}
	complete := len(keys) < laneBatch
	keys = a.withoutGone(keys, gen)
	a.keys, a.complete, a.listedAt = keys, complete, now
	if len(keys) == 0 {
		a.idle++ // an idle agent is listed less and less often
		return "", nil
	}
	a.idle = 0
	return keys[0], nil
}

// watchRelist is how soon after the last whole-queue listing a signal of
// the store's watch (Worker) lists the lanes again: a signal comes for
// every lane write, this process's own included, so under load the
// listings are bounded to one per watchRelist.
const watchRelist = 10 * time.Millisecond

// relistCost bounds the share of its time a Queue spends listing every
// lane at a watch's (or a busy poll's) prompting: the next such listing
// waits at least relistCost times as long as the last one took, so a
// store whose whole-queue listing is slow (filestore walks a directory per
// agent) spends at most about 1/relistCost of a core on it, however many
// signals its writes cause. The plain laneRecheck pace is never slowed.
const relistCost = 5

// lanesChanged notes the store's signal that the ready lanes changed: the
// next Claim lists them (within watchRelist of the last listing), and
// waiting Worker loops wake to make it.
func (q *Queue) lanesChanged() {
	q.mu.Lock()
	q.lanesDirty = true
	q.mu.Unlock()
	q.schedMu.Lock()
	q.wakeWaiters()
	q.schedMu.Unlock()
}

// pollLanes lists every lane now, unless a listing ran less than busyPoll
// ago (Worker.pollLanes).
func (q *Queue) pollLanes(ctx context.Context) error {
	q.mu.Lock()
	q.lanesPoll = true
	q.mu.Unlock()
	return q.refreshLanes(ctx)
}

// foundWork counts the listings of every lane that found new work (an
// agent's first ready key not known before).
func (q *Queue) foundWork() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.newWork
}

// globalBatch bounds the keys one refreshLanes reads (ten S3 List pages).
const globalBatch = 10000

// refreshLanes lists every agent's lane at once (queue/lanes/, up to
// globalBatch keys), at most once per laneRecheck, fills the empty caches
// of the agents it covered and schedules those with work: one List finds
// new work of every idle agent, instead of one List per idle agent.
// Agents past a truncated listing keep their own, backing-off rechecks in
// head.
func (q *Queue) refreshLanes(ctx context.Context) error {
	now := q.clock.Now()
	gen, due := q.relistDue(now)
	if !due {
		return nil
	}
	// The cost is the listing's real duration, whatever the Queue's clock.
	began := time.Now()
	defer func() {
		q.mu.Lock()
		q.listCost = time.Since(began)
		q.mu.Unlock()
	}()
	l, err := q.listAllLanes(ctx)
	if err != nil {
		return err
	}
	found := false
	defer func() {
		if found {
			q.mu.Lock()
			q.newWork++
			q.mu.Unlock()
		}
	}()
	for name := range l.byAgent {
		if storage.ValidateID("agent slug", name) == nil {
			q.agent(name)
		}
	}
	q.mu.Lock()
	agents := make([]*agentState, 0, len(q.agents))
	for _, a := range q.agents {
		agents = append(agents, a)
	}
	q.mu.Unlock()
	for _, a := range agents {
		if first := a.fillLanes(l, gen, now); first != "" {
			found = true
			at, _, ok := parseLaneKey(first)
			if !ok {
				at = now // malformed: claimAgent cleans it up
			}
			q.schedule(a, at)
		}
	}
	return nil
}

// relistDue reports whether refreshLanes is due to list at now and, if so,
// marks it listing and returns the listing's generation.
func (q *Queue) relistDue(now time.Time) (gen uint64, due bool) {
	q.mu.Lock()
	every := laneRecheck
	switch {
	case q.lanesDirty:
		every = watchRelist
	case q.lanesPoll:
		every = busyPoll
	}
	every = min(laneRecheck, max(every, relistCost*q.listCost))
	if !q.globalAt.IsZero() && now.Sub(q.globalAt) < every && !now.Before(q.globalAt) {
		q.mu.Unlock()
		return 0, false
	}
	q.globalAt, q.lanesDirty, q.lanesPoll = now, false, false
	gen = q.listGen.Add(1)
	q.mu.Unlock()
	return gen, true
}

// laneListing is one listing of every agent's lane (listAllLanes).
type laneListing struct {
	byAgent   map[string][]string // up to laneBatch keys per agent
	truncated bool                // globalBatch keys reached
	last      string              // the last key listed
	lastAgent string              // its agent
}

// listAllLanes lists queue/lanes/, up to globalBatch keys.
func (q *Queue) listAllLanes(ctx context.Context) (*laneListing, error) {
	byAgent := map[string][]string{}
	truncated, last := false, ""
	n := 0
	for key, err := range q.store.List(ctx, lanePrefix) {
		if err != nil {
			return nil, err
		}
		if n++; n > globalBatch {
			truncated = true
			break
		}
		last = key
		if agent, ok := layout.LaneAgent(key); ok && len(byAgent[agent]) < laneBatch {
			byAgent[agent] = append(byAgent[agent], key)
		}
	}
	lastAgent, _ := layout.LaneAgent(last)
	return &laneListing{byAgent: byAgent, truncated: truncated, last: last, lastAgent: lastAgent}, nil
}

// fillLanes fills a's lane cache from l, listed at now as generation gen,
// when it is empty, or merges in work l shows ahead of it, and returns
// the first key to schedule a at ("" for none).
func (a *agentState) fillLanes(l *laneListing, gen uint64, now time.Time) string {
	covered := !l.truncated || lanePrefix+a.name+"/" <= l.last
	keys := l.byAgent[a.name]
	a.mu.Lock()
	keys = a.withoutGone(keys, gen)
	a.covered = covered
	var first string
	switch {
	case covered && len(a.keys) == 0:
		a.keys, a.listedAt = keys, now
		a.complete = len(keys) < laneBatch && !(l.truncated && a.name == l.lastAgent)
		if len(keys) == 0 {
			a.idle++
		} else {
			a.idle = 0
			first = keys[0]
		}
	case len(keys) > 0 && len(a.keys) > 0 && keys[0] < a.keys[0]:
		// Another process put work ahead of what the cache holds (say,
		// a job enqueued now before a retry due later): merge it in.
		a.keys = slices.Compact(slices.Sorted(slices.Values(append(slices.Clip(a.keys), keys...))))
		a.complete = a.complete && !(l.truncated && a.name == l.lastAgent)
		first = a.keys[0]
	}
	a.mu.Unlock()
	return first
}

// lockCheckDue reports whether a's lock should be read for an orphan, at
// most once per every, and when it next should be.
func (a *agentState) lockCheckDue(now time.Time, every time.Duration) (bool, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.lockAt.IsZero() && now.Sub(a.lockAt) < every && !now.Before(a.lockAt) {
		return false, a.lockAt.Add(every)
	}
	a.lockAt = now
	return true, now.Add(every)
}

// maxGone is how many lane keys an agent remembers deleting (deleteLane):
// more than one agent's claims delete while one listing runs.
const maxGone = 8

// goneKey is a lane key this Queue deleted, and the generation of the
// lane listings (Queue.listGen) when the delete had landed.
type goneKey struct {
	key string
	gen uint64
}

// deleteLane deletes lane entry key of a, which a claim is done with. A
// listing (of a's lane, or of every lane) that began before the delete
// landed may still hold the key; it must not put it back in a's cache, where the next claim
// would rewrite the lock to name a job long gone and delete the entry
// again: two writes for nothing. So the key is remembered (maxGone) and
// such a listing leaves it out (refreshLanes).
func (q *Queue) deleteLane(ctx context.Context, a *agentState, key string) {
	a.mu.Lock()
	a.dropLocked(key)
	if len(a.gone) == maxGone {
		a.gone = slices.Delete(a.gone, 0, 1)
	}
	// Left out of every listing until the delete has landed.
	a.gone = append(a.gone, goneKey{key, math.MaxUint64})
	a.mu.Unlock()
	_ = q.store.Delete(ctx, key, storage.Condition{})
	gen := q.listGen.Load()
	a.mu.Lock()
	for i := range a.gone {
		if a.gone[i].key == key {
			a.gone[i].gen = gen
		}
	}
	a.mu.Unlock()
}

// withoutGone returns keys, listed by the listing of generation gen, less
// those a's claims deleted after that listing may have begun. a.mu must be
// held.
func (a *agentState) withoutGone(keys []string, gen uint64) []string {
	if len(a.gone) == 0 || len(keys) == 0 {
		return keys
	}
	return slices.DeleteFunc(keys, func(k string) bool {
		return slices.ContainsFunc(a.gone, func(g goneKey) bool { return g.key == k && g.gen >= gen })
	})
}

// dropLocked removes key from a's cache; a.mu must be held.
func (a *agentState) dropLocked(key string) {
	for i, k := range a.keys {
		if k == key {
			a.keys = append(a.keys[:i], a.keys[i+1:]...)
			return
		}
	}
}

// forget empties a's cache, so the next head lists the lane again.
func (a *agentState) forget() {
	a.mu.Lock()
	a.keys, a.listedAt = nil, time.Time{}
	a.mu.Unlock()
}

// idleUntil is when an agent with no ready job is next worth a look: its
// lane's head becomes ready, its lock is due an orphan check (lockAt), or,
// for a lane no whole-queue listing covers, the lane is due a listing.
func (a *agentState) idleUntil(lockAt time.Time) time.Time {
	next := lockAt
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.keys) > 0 {
		if at, _, ok := parseLaneKey(a.keys[0]); ok && at.Before(next) {
			next = at
		}
	} else if !a.covered || !a.complete {
		next = minTime(next, a.recheckAt())
	}
	return next
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
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
func (q *Queue) claimAgent(ctx context.Context, worker string, a *agentState, now time.Time, noAssembly func(lifecycle.JobType) bool) (*Claim, time.Time, error) {
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

	lockKey string // the agent's lock
	head    string // the lane's first key at the look, "" if none
	ready   bool   // head is due (or malformed)
	lockAt  time.Time
	lock    agentLock
	lockVer storage.Version
	cached  bool // lock came from this Queue's cache (agentState.keep)
}

// probeAgent looks at a's lane head and, when it is ready or an orphan
// check is due, reads the agent's lock into s. done: claimAgent returns
// next and err.
func (q *Queue) probeAgent(ctx context.Context, s *agentClaim) (next time.Time, done bool, err error) {
	a, now := s.a, s.now
	lockKey, err := layout.AgentLockKey(a.name)
	if err != nil {
		return now.Add(time.Hour), true, err
	}
	s.lockKey = lockKey
	head, err := q.head(ctx, a, false)
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
	a.mu.Lock()
	busyUntil := a.busyUntil
	a.mu.Unlock()
	if ready && now.Before(busyUntil) {
		return busyUntil, true, nil // its lock was held a moment ago
	}
	due, lockAt := a.lockCheckDue(now, q.cfg.LeaseTTL/2)
	s.lockAt = lockAt
	if !ready && !due {
		return a.idleUntil(lockAt), true, nil
	}
	s.lock, s.lockVer, s.cached, err = q.readLock(ctx, a, lockKey)
	if errors.Is(err, storage.ErrNotFound) {
		return now.Add(laneRecheck), true, nil // the agent's first job is being enqueued
	}
	if err != nil {
		return time.Time{}, true, err
	}
	return time.Time{}, false, nil
}

// lockedOrphan decides, from the lock probeAgent read, whether the lock can
// be taken, and returns the job it names that is still to be rescued under
// the new epoch ("" if none). done: claimAgent returns next and err.
func (q *Queue) lockedOrphan(ctx context.Context, s *agentClaim) (orphan string, next time.Time, done bool, err error) {
	a, now, ready, lockAt := s.a, s.now, s.ready, s.lockAt
	lock := &s.lock
	// kept: a lock this Queue's last claim of the agent kept past its end,
	// its job settled (Claim.end). ended: the job a lock held by another
	// process (or an earlier life of this one) names ended its run under
	// the lock's epoch, so the lock was kept, not released; its claim may
	// not have settled the job (laned it, buried it, flushed its audit)
	// before it stopped, so this claim settles it before the lock names
	// another job (active.go).
	kept := s.cached && lock.Owner != ""
	var named *jobDoc // the job the lock names, read: ended, or the lock free
	if !kept && ready && !lock.free(now) && lock.JobID != "" {
		d, ended, err := q.lockEnded(ctx, lock)
		if err != nil {
			return "", time.Time{}, true, err
		}
		if ended {
			named = &d
		}
	}
	if !ready && kept && s.cached {
		a.keep(lock, s.lockVer) // not taken now: the next claim still may without reading
	}
	if !kept && named == nil && !lock.free(now) {
		until := now.Add(min(q.cfg.LeaseTTL/4, time.Second))
		a.mu.Lock()
		a.busyUntil = until
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
		if orphan, err = q.settleNamed(ctx, orphan, named); err != nil {
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
func (q *Queue) settleNamed(ctx context.Context, orphan string, named *jobDoc) (string, error) {
	if named == nil {
		d, _, err := q.read(ctx, orphan)
		switch {
		case err == nil:
			named = &d
		case errors.Is(err, storage.ErrNotFound):
			orphan = "" // gone (its Enqueue undone, or quarantined): nothing to repair
		default:
			return "", err
		}
	}
	if named != nil && !pipelineState(named.Status) {
		if err := q.settle(ctx, named); err != nil {
			return "", err // the lock goes on naming it
		}
		orphan = ""
	}
	return orphan, nil
}

// takeLock takes the agent lock with a new epoch, the fencing token of
// whatever job this claim runs or rescues, and rescues orphan under it.
// done: claimAgent returns next and err.
func (q *Queue) takeLock(ctx context.Context, s *agentClaim, orphan string) (c *Claim, next time.Time, done bool, err error) {
	now, lock := s.now, &s.lock
	lock.Owner, lock.Epoch, lock.ExpiresAt = s.worker, lock.Epoch+1, now.Add(q.cfg.LeaseTTL)
	if orphan == "" {
		// Name the job about to be picked up in the same write; with an
		// orphan, the lock keeps naming it until it is rescued.
		_, lock.JobID, _ = parseLaneKey(s.head)
	}
	c = &Claim{q: q, worker: s.worker, epoch: lock.Epoch, agent: s.a, noAssembly: s.noAssembly}
	if s.lockVer, err = q.writeLock(ctx, s.lockKey, lock, s.lockVer); err != nil {
		if errors.Is(err, storage.ErrPreconditionFailed) {
			if s.cached {
				return nil, now, true, nil // the lock changed since this Queue freed it: read it and try again
			}
			return nil, now.Add(min(q.cfg.LeaseTTL/4, time.Second)), true, nil // another worker took it first
		}
		return nil, time.Time{}, true, err
	}
	c.lockVer = s.lockVer
	if orphan != "" {
		c.named = orphan // a failed repair leaves the lock naming it (active.go)
		if err := q.repairOrphan(ctx, orphan, c.epoch); err != nil && !errors.Is(err, storage.ErrNotFound) {
			c.release(ctx)
			return nil, time.Time{}, true, err
		}
		if q.hasAuditGap(orphan) {
			c.release(ctx) // its audit object is still to be written: named on
			return nil, now.Add(laneRecheck), true, nil
		}
		c.named = ""
	}
	return c, time.Time{}, false, nil
}

// pickupHead, under the lock c holds, picks up the first ready job of the
// lane, dropping stale and dead entries on the way (at most 64).
func (q *Queue) pickupHead(ctx context.Context, s *agentClaim, c *Claim) (*Claim, time.Time, error) {
	a := s.a
	pending := "" // a lane entry whose job may still be being written (lanePending)
	for range 64 {
		key, err := q.head(ctx, a, true)
		if err != nil || key == "" {
			c.release(ctx)
			return nil, a.idleUntil(s.lockAt), err
		}
		at, jobID, ok := parseLaneKey(key)
		if !ok {
			q.deleteLane(ctx, a, key)
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
func (q *Queue) pickupEntry(ctx context.Context, s *agentClaim, c *Claim, key, jobID string, pending *string) (got *Claim, next time.Time, done bool, err error) {
	a, now, lock := s.a, s.now, &s.lock
	if lock.JobID != jobID {
		lock.JobID = jobID
		if c.lockVer, err = q.writeLock(ctx, s.lockKey, lock, c.lockVer); err != nil {
			a.forget()
			return nil, time.Time{}, true, err // lost the lock: nothing of ours to release
		}
	}
	c.named = jobID // until the job is settled (active.go)
	doc, ver, picked, err := q.pickup(ctx, key, jobID, c)
	switch {
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
		c.job, c.doc, c.ver = doc.Job, doc, ver
		// The entry goes only once the pickup is confirmed: until then
		// it may be all that points at the job (confirmPickup).
		err := q.confirmPickup(ctx, c, s.lockKey, lock.ExpiresAt)
		if err == nil || errors.Is(err, errLockLost) {
			q.deleteLane(ctx, a, key)
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
	q.deleteLane(ctx, a, key)
	// The job's attempts ran out: it went to FAILED and DEAD; next,
	// unless its audit object is still to be written (active.go).
	if q.hasAuditGap(jobID) {
		c.release(ctx)
		return nil, now.Add(laneRecheck), true, nil
	}
	c.named = ""
	return nil, time.Time{}, false, nil
}

// dropStale handles a lane entry whose job another process took (pickErr
// is errStale or storage.ErrNotFound). done: the claim ends with next and
// err; otherwise pickupHead goes on with the next entry.
func (q *Queue) dropStale(ctx context.Context, s *agentClaim, c *Claim, key string, pickErr error, pending *string) (next time.Time, done bool, err error) {
	a := s.a
	// Another process took it: the cache is out of date, so list
	// the lane afresh rather than try its other entries one by one.
	a.forget()
	if q.pendingAfter(key, pickErr, q.clock.Now()) {
		// Written moments ago by an Enqueue or Requeue that writes
		// its job next: left alone (active.go).
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
	var se *staleEntry
	if errors.As(pickErr, &se) {
		if err := q.repairStale(ctx, key, se, c.epoch); err != nil {
			c.release(ctx) // still naming the job
			return time.Time{}, true, err
		}
	}
	c.named = ""
	q.deleteLane(ctx, a, key)
	return time.Time{}, false, nil
}

// errLockLost: the agent lock was taken over before the claim's pickup
// landed (confirmPickup).
var errLockLost = errors.New("jobqueue: agent lock lost before the pickup")

// confirmPickup makes sure the agent lock still named c's job when the
// pickup's write landed. The pickup is a compare-and-swap on the job, not
// on the lock: a claim paused past the lock's expiry between its take and
// its pickup may find the lock taken by another process that named another
// job, and its pickup then leaves the job in a pipeline state in no lane and
// named by no lock, out of reach of every claim and of the sweep
// (active.go). While the lock's expiry is certainly ahead (no other process
// takes a lock before it expires) nothing is read; otherwise the lock is
// read, and a lock changed since the claim's last write of it means it was
// lost: the job is rescued back to its lane (a failed attempt, as for any
// claim that lost its lease) under the epoch of the lock as it now is, and
// errLockLost is returned. If the lock cannot be read the claim releases
// it still naming the job (lost already, the release changes nothing).
func (q *Queue) confirmPickup(ctx context.Context, c *Claim, lockKey string, expires time.Time) error {
	if core.LeaseCertain(expires, q.clock.Now(), q.cfg.LeaseTTL) {
		return nil
	}
	rec := &core.Record[agentLock, *agentLock]{Store: q.store, Key: lockKey}
	cur, ver, err := rec.Load(ctx)
	switch {
	case err == nil && ver == c.lockVer:
		return nil // held since the take, naming the job: any later taker repairs it
	case err != nil && !errors.Is(err, storage.ErrNotFound) && !errors.Is(err, records.ErrCorrupt):
		c.release(ctx) // c.named is the job
		return err
	}
	epoch := c.epoch + 1
	if err == nil && cur.Epoch > c.epoch {
		epoch = cur.Epoch
	}
	if err := q.rescue(context.WithoutCancel(ctx), c.job.JobID, epoch); err != nil {
		return err
	}
	return errLockLost
}

// lockEnded tells whether the job a held lock names ended its run under
// the lock's epoch (ran_epoch), so the lock, kept rather than released by
// its last claim, is free; d is the job as read.
func (q *Queue) lockEnded(ctx context.Context, l *agentLock) (d jobDoc, ended bool, err error) {
	d, _, err = q.read(ctx, l.JobID)
	if errors.Is(err, storage.ErrNotFound) {
		return d, false, nil
	}
	if err != nil {
		return d, false, err
	}
	return d, d.RanEpoch >= l.Epoch && !pipelineState(d.Status), nil
}

// keep puts back the lock readLock took from the cache, unused.
func (a *agentState) keep(l *agentLock, ver storage.Version) {
	a.mu.Lock()
	if a.freed == nil {
		a.freed, a.freedVer = l, ver
	}
	a.mu.Unlock()
}

// releaseKept releases the agent locks this Queue's claims kept past their
// end (Claim.end), so other processes need not wait for them to lapse or
// read the jobs they name. A lock changed since is left alone.
func (q *Queue) releaseKept(ctx context.Context) {
	q.mu.Lock()
	agents := make([]*agentState, 0, len(q.agents))
	for _, a := range q.agents {
		agents = append(agents, a)
	}
	q.mu.Unlock()
	for _, a := range agents {
		a.mu.Lock()
		l, ver := a.freed, a.freedVer
		if l != nil && l.Owner != "" {
			a.freed, a.freedVer = nil, ""
		} else {
			l = nil
		}
		a.mu.Unlock()
		if l == nil {
			continue
		}
		key, err := layout.AgentLockKey(a.name)
		if err != nil {
			continue
		}
		free := agentLock{Agent: a.name, Epoch: l.Epoch}
		if _, err := q.writeLock(ctx, key, &free, ver); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
			q.log.WarnContext(ctx, "jobqueue: releasing agent lock", "agent", a.name, "err", err)
		}
	}
}

// readLock returns a's lock: the copy this Queue freed (or kept) last,
// used once (cached), or else the stored one.
func (q *Queue) readLock(ctx context.Context, a *agentState, key string) (lock agentLock, ver storage.Version, cached bool, err error) {
	a.mu.Lock()
	if a.freed != nil {
		lock, ver, cached = *a.freed, a.freedVer, true
		a.freed, a.freedVer = nil, ""
	}
	a.mu.Unlock()
	if cached {
		return lock, ver, true, nil
	}
	rec := &core.Record[agentLock, *agentLock]{Store: q.store, Key: key, Validate: func(l *agentLock) error {
		if l.Agent != a.name {
			return fmt.Errorf("lock of agent %q at the key of %q", l.Agent, a.name)
		}
		return nil
	}}
	lock, ver, err = rec.Load(ctx)
	if err = q.poison(ctx, err); err == nil || !errors.Is(err, records.ErrCorrupt) {
		return lock, ver, false, err
	}
	// The junk lock is in quarantine, and its epoch with it. Epochs must
	// only grow (they fence the lock's earlier holders), so the new lock
	// starts from the clock in milliseconds, beyond any count of claims.
	fresh := agentLock{Agent: a.name, Epoch: q.clock.Now().UnixMilli()}
	ver, err = rec.Create(ctx, fresh)
	if err != nil {
		return lock, "", false, err // ErrPreconditionFailed: another worker made it; next look reads it
	}
	fresh.Version = 1
	return fresh, ver, false, nil
}

func (q *Queue) writeLock(ctx context.Context, key string, l *agentLock, ver storage.Version) (storage.Version, error) {
	b, err := json.Marshal(l)
	if err != nil {
		return "", err
	}
	return q.store.Put(ctx, key, b, storage.IfMatch(ver))
}

// pickup moves the job of lane entry key on: QUEUED → CONTEXT_ASSEMBLY
// with the claim's lease and attempt+1, or from RETRY_BACKOFF through
// backoff_elapsed to QUEUED and on to CONTEXT_ASSEMBLY, or to FAILED
// (attempts exhausted) and then DEAD. picked tells whether the claim now
// runs the job.
func (q *Queue) pickup(ctx context.Context, key, jobID string, c *Claim) (jobDoc, storage.Version, bool, error) {
	orch := lifecycle.ActorOrchestration
	doc, ver, err := q.update(ctx, jobID, nil, "", func(d *jobDoc, now time.Time) error {
		if d.ReadyKey != key || (d.Status != lifecycle.JobQueued && d.Status != lifecycle.JobRetryBackoff) {
			return &staleEntry{doc: *d}
		}
		if d.Status == lifecycle.JobRetryBackoff {
			if d.NextAttemptAt != nil && d.NextAttemptAt.After(now) {
				return errNotReady
			}
			if err := q.fire(ctx, d, lifecycle.EventBackoffElapsed, orch); err != nil {
				return err
			}
			d.NextAttemptAt = nil
			if d.Status == lifecycle.JobFailed {
				d.ReadyKey = ""
				return nil
			}
			d.QueuedAt = &now
		}
		if err := q.fire(ctx, d, lifecycle.EventPickup, orch); err != nil {
			return err
		}
		d.Attempt++
		d.ReadyKey = ""
		d.Lease = &records.Lease{Owner: c.worker, Epoch: c.epoch, ExpiresAt: now.Add(q.cfg.LeaseTTL)}
		if c.noAssembly != nil && c.noAssembly(d.JobType) {
			return q.fire(ctx, d, lifecycle.EventSnapshotReady, orch)
		}
		return nil
	})
	if err != nil {
		return jobDoc{}, "", false, err
	}
	if doc.Status == lifecycle.JobFailed {
		_, err := q.bury(ctx, jobID, &doc, ver)
		return jobDoc{}, "", false, err
	}
	return doc, ver, true, nil
}

// bury moves a FAILED job to DEAD (003 §1.2: max retries exceeded).
func (q *Queue) bury(ctx context.Context, jobID string, cached *jobDoc, ver storage.Version) (lifecycle.Job, error) {
	d, _, err := q.update(ctx, jobID, cached, ver, func(d *jobDoc, _ time.Time) error {
		if d.Status != lifecycle.JobFailed {
			return nil // buried by someone else, or requeued
		}
		return q.fire(ctx, d, lifecycle.EventBury, lifecycle.ActorOrchestration)
	})
	return d.Job, err
}

func pipelineState(s lifecycle.JobState) bool {
	return s == lifecycle.JobContextAssembly || s == lifecycle.JobNotebookLMCall || s == lifecycle.JobArtifactWrite
}

// rescue moves an orphan (a job in a pipeline state whose worker's lease
// ran out) to RETRY_BACKOFF as a failed attempt, taking the lease away so
// that its old worker can no longer write. epoch is the rescuer's agent
// lock epoch, newer than the orphan's.
func (q *Queue) rescue(ctx context.Context, jobID string, epoch int64) error {
	var lane string
	var at time.Time
	job, _, err := q.update(ctx, jobID, nil, "", func(d *jobDoc, now time.Time) error {
		lane = ""
		if !pipelineState(d.Status) || d.Lease != nil && d.Lease.Epoch >= epoch && now.Before(d.Lease.ExpiresAt) {
			return nil
		}
		msg := "orphan without a lease"
		if d.Lease != nil {
			msg = fmt.Sprintf("lease of %s (epoch %d) expired", d.Lease.Owner, d.Lease.Epoch)
		}
		q.retry(ctx, d, now, d.Status, codes.JobLeaseExpired, msg)
		lane, at = d.ReadyKey, *d.NextAttemptAt
		return nil
	})
	if err != nil || lane == "" {
		return err
	}
	return q.putLane(ctx, lane, job.JobID, at)
}

// retry fires retryable_error on d (a pipeline state) and schedules the
// next attempt; a permanent failure (code PERMANENT) goes on to FAILED in
// the same write instead.
func (q *Queue) retry(ctx context.Context, d *jobDoc, now time.Time, step lifecycle.JobState, code, msg string) {
	// The moves are judged on the record alone: a context that ends while
	// the write is under way (a Worker stopping) must not make the machine
	// refuse them (the store calls still honour it).
	ctx = context.WithoutCancel(ctx)
	if err := q.fire(ctx, d, lifecycle.EventRetryableError, lifecycle.ActorOrchestration); err != nil {
		panic(fmt.Sprintf("jobqueue: retryable_error from %s refused: %v", d.Status, err)) // the table has it from every pipeline state
	}
	d.Error, d.ErrorCode, d.FailedStep, d.Lease = &msg, code, step, nil
	if code == codes.JobPermanent {
		// No wait: backoff_elapsed's guard sends it to FAILED at once.
		if err := q.fire(ctx, d, lifecycle.EventBackoffElapsed, lifecycle.ActorOrchestration); err != nil {
			panic(fmt.Sprintf("jobqueue: backoff_elapsed of a permanent failure refused: %v", err))
		}
		d.NextAttemptAt, d.ReadyKey = nil, ""
		return
	}
	next := now.Add(q.backoff(d.Attempt))
	d.NextAttemptAt, d.ReadyKey = &next, laneKey(d.AgentSlug, next, d.JobID)
}
