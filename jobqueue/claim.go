package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// laneBatch is how many lane keys one List reads (one S3 page): claiming
// costs one List per laneBatch jobs of an agent, so finding work is O(1)
// store calls amortized, never a scan of the jobs.
const laneBatch = 1000

// Claim finds a ready job of any agent whose lock is free and picks it
// up for worker, or returns nil when there is none. On the way it rescues
// the orphan of an expired lock and moves on the jobs whose backoff ran
// out. worker must be unique among the workers sharing the store.
func (q *Queue) Claim(ctx context.Context, worker string) (*Claim, error) {
	if err := storage.ValidateID("worker id", worker); err != nil {
		return nil, err
	}
	agents, err := q.agentList(ctx)
	if err != nil {
		return nil, err
	}
	if len(agents) == 0 {
		return nil, nil
	}
	if err := q.refreshLanes(ctx, agents); err != nil {
		return nil, err
	}
	start := rand.IntN(len(agents))
	var firstErr error
	for i := range agents {
		c, err := q.claimAgent(ctx, worker, agents[(start+i)%len(agents)])
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if c != nil {
			return c, nil
		}
	}
	return nil, firstErr
}

// agentList returns the agents with a lock object, listed at most once per
// second (agents this Queue enqueued for are known at once).
func (q *Queue) agentList(ctx context.Context) ([]string, error) {
	now := q.clock.Now()
	q.mu.Lock()
	fresh := !q.agentAt.IsZero() && now.Sub(q.agentAt) < time.Second && now.After(q.agentAt.Add(-time.Second))
	out := append([]string(nil), q.agents...)
	q.mu.Unlock()
	if fresh {
		return out, nil
	}
	var agents []string
	for key, err := range q.store.List(ctx, agentPrefix) {
		if err != nil {
			return nil, err
		}
		name, ok := cutAgentKey(key)
		if ok {
			agents = append(agents, name)
		}
	}
	q.mu.Lock()
	for _, a := range agents {
		q.known[a] = true
	}
	for _, a := range q.agents { // keep agents enqueued here since the List started
		if !containsString(agents, a) {
			agents = append(agents, a)
		}
	}
	q.agents, q.agentAt = agents, now
	q.mu.Unlock()
	return append([]string(nil), agents...), nil
}

func cutAgentKey(key string) (string, bool) {
	if len(key) <= len(agentPrefix)+5 || key[len(key)-5:] != ".json" {
		return "", false
	}
	name := key[len(agentPrefix) : len(key)-5]
	return name, storage.ValidateID("agent slug", name) == nil
}

func (q *Queue) lane(agent string) *laneCache {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lanes[agent]
	if l == nil {
		l = &laneCache{}
		q.lanes[agent] = l
	}
	return l
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

// head returns the first lane key of agent. It lists the lane (laneBatch
// keys) when the cache is empty, or when the cached head is not ready yet,
// unless the last listing is less than laneRecheck old; force lists an
// empty cache regardless. It does not remove the key.
func (q *Queue) head(ctx context.Context, agent string, force bool) (string, error) {
	l := q.lane(agent)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := q.clock.Now()
	recheck := laneRecheck << min(l.idle, maxIdleShift)
	fresh := !l.listedAt.IsZero() && now.Sub(l.listedAt) < recheck && !now.Before(l.listedAt)
	if len(l.keys) > 0 {
		at, _, ok := parseLaneKey(l.keys[0])
		if !ok || !at.After(now) || fresh {
			return l.keys[0], nil
		}
	} else if fresh && l.complete && !force {
		return "", nil // listed whole and used up less than laneRecheck ago
	}
	prefix, err := LanePrefix(agent)
	if err != nil {
		return "", err
	}
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
	l.keys, l.complete, l.listedAt = keys, len(keys) < laneBatch, now
	if len(keys) == 0 {
		l.idle++ // an idle agent is listed less and less often
		return "", nil
	}
	l.idle = 0
	return keys[0], nil
}

// globalBatch bounds the keys one refreshLanes reads (ten S3 List pages).
const globalBatch = 10000

// refreshLanes lists every agent's lane at once (jobs/queue/, up to
// globalBatch keys), at most once per laneRecheck, and fills the empty
// caches of the agents it covered: one List finds new work of every idle
// agent, instead of one List per idle agent. Agents past a truncated
// listing keep their own, backing-off rechecks in head.
func (q *Queue) refreshLanes(ctx context.Context, agents []string) error {
	now := q.clock.Now()
	q.mu.Lock()
	if !q.globalAt.IsZero() && now.Sub(q.globalAt) < laneRecheck && !now.Before(q.globalAt) {
		q.mu.Unlock()
		return nil
	}
	q.globalAt = now
	q.mu.Unlock()
	byAgent := map[string][]string{}
	truncated, last := false, ""
	n := 0
	for key, err := range q.store.List(ctx, lanePrefix) {
		if err != nil {
			return err
		}
		if n++; n > globalBatch {
			truncated = true
			break
		}
		last = key
		if agent, ok := laneAgent(key); ok && len(byAgent[agent]) < laneBatch {
			byAgent[agent] = append(byAgent[agent], key)
		}
	}
	lastAgent, _ := laneAgent(last)
	for agent := range byAgent {
		if !containsString(agents, agent) {
			agents = append(agents, agent)
		}
	}
	for _, agent := range agents {
		if truncated && lanePrefix+agent+"/" > last {
			continue // not covered
		}
		keys := byAgent[agent]
		l := q.lane(agent)
		l.mu.Lock()
		if len(l.keys) == 0 {
			l.keys, l.listedAt = keys, now
			l.complete = len(keys) < laneBatch && !(truncated && agent == lastAgent)
			if len(keys) == 0 {
				l.idle++
			} else {
				l.idle = 0
			}
		}
		l.mu.Unlock()
	}
	return nil
}

// busy tells whether the agent's lock was seen held recently enough that
// reading it again is not worth a store call yet.
func (l *laneCache) busy(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.busyUntil)
}

// setBusy skips the agent's lock until t (zero: no more).
func (l *laneCache) setBusy(t time.Time) {
	l.mu.Lock()
	l.busyUntil = t
	l.mu.Unlock()
}

// lockCheckDue reports whether the agent's lock should be read for an
// orphan, at most once per every.
func (l *laneCache) lockCheckDue(now time.Time, every time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lockAt.IsZero() && now.Sub(l.lockAt) < every && !now.Before(l.lockAt) {
		return false
	}
	l.lockAt = now
	return true
}

// drop removes key from agent's cache.
func (q *Queue) drop(agent, key string) {
	l := q.lane(agent)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range l.keys {
		if k == key {
			l.keys = append(l.keys[:i], l.keys[i+1:]...)
			return
		}
	}
}

// forget empties agent's cache, so the next head lists the lane again.
func (q *Queue) forget(agent string) {
	l := q.lane(agent)
	l.mu.Lock()
	l.keys, l.listedAt = nil, time.Time{}
	l.mu.Unlock()
}

var (
	errStale    = errors.New("stale lane entry")
	errNotReady = errors.New("not ready")
)

// claimAgent tries to pick up the next ready job of agent. It reads the
// agent's lock only when the lane has a ready job, or at most twice per
// lease lifetime to find an orphan, so idle agents cost no store calls
// between lane listings.
func (q *Queue) claimAgent(ctx context.Context, worker, agent string) (*Claim, error) {
	lockKey, err := AgentLockKey(agent)
	if err != nil {
		return nil, err
	}
	now := q.clock.Now()
	head, err := q.head(ctx, agent, false)
	if err != nil {
		return nil, err
	}
	ready := false
	if head != "" {
		at, _, ok := parseLaneKey(head)
		ready = !ok || !at.After(now) // a malformed key is cleaned up below
	}
	if ready && q.lane(agent).busy(now) {
		return nil, nil // its lock was held a moment ago
	}
	if !ready && !q.lane(agent).lockCheckDue(now, q.cfg.LeaseTTL/2) {
		return nil, nil
	}
	lock, lockVer, err := storage.Read[agentLock](ctx, q.store, lockKey)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil // the agent's first job is being enqueued
	}
	if err != nil {
		return nil, err
	}
	if !lock.free(now) {
		q.lane(agent).setBusy(now.Add(min(q.cfg.LeaseTTL/4, time.Second)))
		return nil, nil
	}
	orphan := lock.JobID
	if !ready && orphan == "" {
		return nil, nil
	}
	// Take the lock with a new epoch: the fencing token of whatever job
	// this claim runs or rescues.
	lock.Owner, lock.Epoch, lock.ExpiresAt = worker, lock.Epoch+1, now.Add(q.cfg.LeaseTTL)
	if orphan == "" {
		// Name the job about to be picked up in the same write; with an
		// orphan, the lock keeps naming it until it is rescued.
		_, lock.JobID, _ = parseLaneKey(head)
	}
	c := &Claim{q: q, worker: worker, epoch: lock.Epoch, agent: agent}
	if lockVer, err = q.writeLock(ctx, lockKey, &lock, lockVer); err != nil {
		if errors.Is(err, storage.ErrPreconditionFailed) {
			return nil, nil // another worker took it first
		}
		return nil, err
	}
	c.lockVer = lockVer
	if orphan != "" {
		if err := q.rescue(ctx, orphan, c.epoch); err != nil && !errors.Is(err, storage.ErrNotFound) {
			c.release(ctx)
			return nil, err
		}
	}
	for range 64 {
		key, err := q.head(ctx, agent, true)
		if err != nil || key == "" {
			c.release(ctx)
			return nil, err
		}
		at, jobID, ok := parseLaneKey(key)
		if !ok {
			q.drop(agent, key)
			_ = q.store.Delete(ctx, key, storage.Condition{})
			continue
		}
		if at.After(q.clock.Now()) {
			c.release(ctx)
			return nil, nil
		}
		if lock.JobID != jobID {
			lock.JobID = jobID
			if c.lockVer, err = q.writeLock(ctx, lockKey, &lock, c.lockVer); err != nil {
				q.forget(agent)
				return nil, err // lost the lock: nothing of ours to release
			}
		}
		doc, ver, picked, err := q.pickup(ctx, key, jobID, c)
		switch {
		case errors.Is(err, errNotReady):
			q.forget(agent)
			c.release(ctx)
			return nil, nil
		case errors.Is(err, errStale), errors.Is(err, storage.ErrNotFound):
			// Another process took it: the cache is out of date, so list
			// the lane afresh rather than try its other entries one by one.
			q.forget(agent)
			_ = q.store.Delete(ctx, key, storage.Condition{})
			continue
		case err != nil:
			c.release(ctx)
			return nil, err
		}
		q.drop(agent, key)
		_ = q.store.Delete(ctx, key, storage.Condition{})
		if picked {
			c.job, c.doc, c.ver = doc.Job, doc, ver
			return c, nil
		}
		// The job's attempts ran out: it went to FAILED and DEAD; next.
	}
	c.release(ctx)
	return nil, nil
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
		if d.ReadyKey != key || (d.Status != JobQueued && d.Status != JobRetryBackoff) {
			return errStale
		}
		if d.Status == JobRetryBackoff {
			if d.NextAttemptAt != nil && d.NextAttemptAt.After(now) {
				return errNotReady
			}
			if err := q.fire(ctx, d, EventBackoffElapsed, orch); err != nil {
				return err
			}
			d.NextAttemptAt = nil
			if d.Status == JobFailed {
				d.ReadyKey = ""
				return nil
			}
			d.QueuedAt = &now
		}
		if err := q.fire(ctx, d, EventPickup, orch); err != nil {
			return err
		}
		d.Attempt++
		d.ReadyKey = ""
		d.Lease = &Lease{Owner: c.worker, Epoch: c.epoch, ExpiresAt: now.Add(q.cfg.LeaseTTL)}
		return nil
	})
	if err != nil {
		return jobDoc{}, "", false, err
	}
	if doc.Status == JobFailed {
		_, err := q.bury(ctx, jobID, &doc, ver)
		return jobDoc{}, "", false, err
	}
	return doc, ver, true, nil
}

// bury moves a FAILED job to DEAD (003 §1.2: max retries exceeded).
func (q *Queue) bury(ctx context.Context, jobID string, cached *jobDoc, ver storage.Version) (Job, error) {
	d, _, err := q.update(ctx, jobID, cached, ver, func(d *jobDoc, _ time.Time) error {
		if d.Status != JobFailed {
			return nil // buried by someone else, or requeued
		}
		return q.fire(ctx, d, EventBury, lifecycle.ActorOrchestration)
	})
	return d.Job, err
}

func pipelineState(s JobState) bool {
	return s == JobContextAssembly || s == JobNotebookLMCall || s == JobArtifactWrite
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
		q.retry(ctx, d, now, d.Status, CodeLeaseExpired, msg)
		lane, at = d.ReadyKey, *d.NextAttemptAt
		return nil
	})
	if err != nil || lane == "" {
		return err
	}
	return q.putLane(ctx, lane, job.JobID, at)
}

// retry fires retryable_error on d (a pipeline state) and schedules the
// next attempt.
func (q *Queue) retry(ctx context.Context, d *jobDoc, now time.Time, step JobState, code, msg string) {
	if err := q.fire(ctx, d, EventRetryableError, lifecycle.ActorOrchestration); err != nil {
		panic(fmt.Sprintf("jobqueue: retryable_error from %s refused: %v", d.Status, err)) // the table has it from every pipeline state
	}
	next := now.Add(q.backoff(d.Attempt))
	d.Error, d.ErrorCode, d.FailedStep = &msg, code, step
	d.NextAttemptAt, d.ReadyKey, d.Lease = &next, laneKey(d.AgentSlug, next, d.JobID), nil
}

