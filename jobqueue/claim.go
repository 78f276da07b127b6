package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/clock"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// laneBatch is how many lane keys one List reads (one S3 page): claiming
// costs one List per laneBatch jobs of an agent, so finding work is O(1)
// store calls amortized, never a scan of the jobs.
const laneBatch = 1000

// Handlers are the pipeline steps the embedding service supplies (003
// §1.2). The queue runs them in order, each under Config.StepTimeout, and
// writes ARTIFACT_WRITE itself. A handler's error sends the job to
// RETRY_BACKOFF; return a *StatusError for an HTTP status (429, 503) so
// the job's error_code says which.
type Handlers struct {
	// AssembleContext is CONTEXT_ASSEMBLY: it builds the context snapshot
	// (the memory backend's part). Nil means an empty snapshot.
	AssembleContext func(ctx context.Context, job Job) (json.RawMessage, error)
	// CallNotebookLM is NOTEBOOKLM_CALL: it asks the NLM backend and returns
	// the artifact content. Required.
	CallNotebookLM func(ctx context.Context, job Job, snapshot json.RawMessage) (Output, error)
}

// Output is what NOTEBOOKLM_CALL produced: the artifact's content and
// metadata. Its type is the job type's (ArtifactType).
type Output struct {
	Content    json.RawMessage
	EntityRefs []string
	Tags       []string
	Sources    []artifact.SourceRef
}

// StatusError is a handler error carrying an HTTP status, e.g. 429 or 503
// from the NLM backend.
type StatusError struct {
	Code int
	Err  error
}

// Error renders the status and the cause.
func (e *StatusError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("HTTP %d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("HTTP %d: %v", e.Code, e.Err)
}

// Unwrap returns the cause.
func (e *StatusError) Unwrap() error { return e.Err }

// Error codes written to Job.ErrorCode.
const (
	CodeTimeout            = "TIMEOUT"
	CodeRateLimited        = "RATE_LIMITED"
	CodeUnavailable        = "UNAVAILABLE"
	CodeArtifactWriteError = "ARTIFACT_WRITE_ERROR"
	CodeLeaseExpired       = "LEASE_EXPIRED"
	CodeHandlerError       = "HANDLER_ERROR"
)

// errorCode classifies a step's error.
func errorCode(step JobState, stepCtx context.Context, err error) string {
	var se *StatusError
	switch {
	case errors.Is(context.Cause(stepCtx), ErrStepTimeout), errors.Is(err, ErrStepTimeout), errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	case errors.As(err, &se) && se.Code == http.StatusTooManyRequests:
		return CodeRateLimited
	case errors.As(err, &se) && se.Code == http.StatusServiceUnavailable:
		return CodeUnavailable
	case errors.As(err, &se):
		return fmt.Sprintf("HTTP_%d", se.Code)
	case step == JobArtifactWrite:
		return CodeArtifactWriteError
	}
	return CodeHandlerError
}

// Claim is one job a worker has picked up: the job is in CONTEXT_ASSEMBLY
// with the worker's lease, and the worker holds its agent's lock. Run it,
// or Abandon it.
type Claim struct {
	q      *Queue
	worker string
	epoch  int64
	agent  string

	mu      sync.Mutex // serializes the pipeline's and the heartbeat's writes
	job     Job
	doc     jobDoc          // the job as this claim last wrote it
	ver     storage.Version // its store version
	lockVer storage.Version
	done    bool
}

// Job is the job as claimed (or as last written by the claim).
func (c *Claim) Job() Job {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.job
}

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

// release frees the agent lock if the claim still holds it.
func (c *Claim) release(ctx context.Context) {
	key, _ := AgentLockKey(c.agent)
	l := agentLock{Agent: c.agent, Epoch: c.epoch}
	b, _ := json.Marshal(&l)
	// Meta's version is not needed on the lock: only the store's version
	// fences it. Write with If-Match on the version we hold.
	if _, err := c.q.store.Put(context.WithoutCancel(ctx), key, b, storage.IfMatch(c.lockVer)); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		c.q.log.WarnContext(ctx, "jobqueue: releasing agent lock", "agent", c.agent, "err", err)
	}
	c.q.lane(c.agent).setBusy(time.Time{}) // free: this Queue may claim it at once
}

// Abandon gives the claim up without running it: the job goes back to
// RETRY_BACKOFF as a failed attempt and the agent lock is released.
func (c *Claim) Abandon(ctx context.Context) error {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return nil
	}
	c.done = true
	step := c.job.Status
	c.mu.Unlock()
	defer c.release(ctx)
	_, err := c.fail(ctx, step, CodeHandlerError, "claim abandoned")
	return err
}

// write runs mutate on the job only while the claim's lease holds.
func (c *Claim) write(ctx context.Context, mutate func(d *jobDoc, now time.Time) error) (Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeLocked(ctx, mutate)
}

// writeLocked is write with c.mu held.
func (c *Claim) writeLocked(ctx context.Context, mutate func(d *jobDoc, now time.Time) error) (Job, error) {
	doc, ver, err := c.q.update(ctx, c.job.JobID, &c.doc, c.ver, func(d *jobDoc, now time.Time) error {
		if d.Lease == nil || d.Lease.Owner != c.worker || d.Lease.Epoch != c.epoch || !now.Before(d.Lease.ExpiresAt) {
			return fmt.Errorf("%w: job %s", ErrLeaseLost, d.JobID)
		}
		return mutate(d, now)
	})
	if err == nil {
		c.job, c.doc, c.ver = doc.Job, doc, ver
	}
	return doc.Job, err
}

func (c *Claim) move(ctx context.Context, event lifecycle.Event, set func(d *jobDoc)) error {
	_, err := c.write(ctx, func(d *jobDoc, _ time.Time) error {
		if err := c.q.fire(ctx, d, event, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		if set != nil {
			set(d)
		}
		return nil
	})
	return err
}

func (c *Claim) fail(ctx context.Context, step JobState, code, msg string) (Job, error) {
	var lane string
	var at time.Time
	job, err := c.write(ctx, func(d *jobDoc, now time.Time) error {
		c.q.retry(ctx, d, now, step, code, msg)
		lane, at = d.ReadyKey, *d.NextAttemptAt
		return nil
	})
	if err != nil {
		return job, err
	}
	return job, c.q.putLane(ctx, lane, job.JobID, at)
}

// heartbeat renews the agent lock and the job's lease every LeaseTTL/3
// until stop is called; when renewal finds the lease lost it cancels the
// run with ErrLeaseLost.
func (c *Claim) heartbeat(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		timer   clock.Timer
		wg      sync.WaitGroup
	)
	every := c.q.cfg.LeaseTTL / 3
	var beat func()
	beat = func() {
		defer wg.Done()
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		mu.Unlock()
		if err := c.renew(ctx); err != nil {
			if errors.Is(err, ErrLeaseLost) {
				cancel(err)
				return
			}
			c.q.log.WarnContext(ctx, "jobqueue: heartbeat", "job_id", c.Job().JobID, "err", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			wg.Add(1)
			timer = c.q.clock.AfterFunc(every, beat)
		}
	}
	wg.Add(1)
	mu.Lock()
	timer = c.q.clock.AfterFunc(every, beat)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		if timer.Stop() {
			wg.Done()
		}
		mu.Unlock()
		wg.Wait()
	}
}

func (c *Claim) renew(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || !pipelineState(c.job.Status) {
		return nil // finished: nothing left to keep alive
	}
	key, _ := AgentLockKey(c.agent)
	now := c.q.clock.Now()
	l := agentLock{Agent: c.agent, Owner: c.worker, Epoch: c.epoch, JobID: c.job.JobID, ExpiresAt: now.Add(c.q.cfg.LeaseTTL)}
	b, _ := json.Marshal(&l)
	v, err := c.q.store.Put(ctx, key, b, storage.IfMatch(c.lockVer))
	if errors.Is(err, storage.ErrPreconditionFailed) {
		return fmt.Errorf("%w: agent lock of %s taken over", ErrLeaseLost, c.agent)
	}
	if err != nil {
		return err
	}
	c.lockVer = v
	_, err = c.writeLocked(ctx, func(d *jobDoc, now time.Time) error {
		l := *d.Lease
		l.ExpiresAt = now.Add(c.q.cfg.LeaseTTL)
		d.Lease = &l // replace, never write through: update's cache shares pointers
		return nil
	})
	return err
}

// Run runs the claimed job's pipeline (003 §1.2): CONTEXT_ASSEMBLY →
// NOTEBOOKLM_CALL → ARTIFACT_WRITE → COMPLETE, each step's error sending
// it to RETRY_BACKOFF (retried after Config.Backoff while attempts are
// left). ARTIFACT_WRITE creates the job's one artifact (create-once by job
// id, finalized) and COMPLETE points the job at it in the same write, so
// no reader sees COMPLETE without its finalized artifact (F3). It returns
// the job as last written. An error means the claim could not write
// (ErrLeaseLost when another worker rescued the job); a handler's failure
// is not an error of Run, it is the job's state.
func (c *Claim) Run(ctx context.Context, h Handlers) (Job, error) {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return c.job, errors.New("jobqueue: claim already run")
	}
	c.mu.Unlock()
	if h.CallNotebookLM == nil {
		_ = c.Abandon(ctx)
		return c.Job(), errors.New("jobqueue: Handlers.CallNotebookLM is required")
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := c.heartbeat(runCtx, cancel)
	job, err := c.pipeline(runCtx, h)
	stop()
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	if cause := context.Cause(runCtx); err == nil && cause != nil && errors.Is(cause, ErrLeaseLost) {
		err = cause
	}
	c.release(ctx)
	return job, err
}

// step runs fn under the step timeout, on the queue's clock.
func (c *Claim) step(ctx context.Context, fn func(ctx context.Context) error) (context.Context, error) {
	sctx, cancel := context.WithCancelCause(ctx)
	t := c.q.clock.AfterFunc(c.q.cfg.StepTimeout, func() { cancel(ErrStepTimeout) })
	err := fn(sctx)
	t.Stop()
	cancel(nil)
	return sctx, err
}

func (c *Claim) pipeline(ctx context.Context, h Handlers) (Job, error) {
	orchestrate := func(step JobState, sctx context.Context, err error) (Job, error) {
		if errors.Is(context.Cause(ctx), ErrLeaseLost) {
			return c.Job(), context.Cause(ctx)
		}
		code := errorCode(step, sctx, err)
		return c.fail(context.WithoutCancel(ctx), step, code, err.Error())
	}
	job := c.Job()
	var snapshot json.RawMessage
	if h.AssembleContext != nil {
		sctx, err := c.step(ctx, func(ctx context.Context) (err error) {
			snapshot, err = h.AssembleContext(ctx, job)
			return err
		})
		if err != nil {
			return orchestrate(JobContextAssembly, sctx, err)
		}
	}
	if err := c.move(ctx, EventSnapshotReady, nil); err != nil {
		return c.Job(), err
	}
	job = c.Job()
	var out Output
	sctx, err := c.step(ctx, func(ctx context.Context) (err error) {
		out, err = h.CallNotebookLM(ctx, job, snapshot)
		return err
	})
	if err != nil {
		return orchestrate(JobNotebookLMCall, sctx, err)
	}
	if err := c.move(ctx, EventResponseOK, nil); err != nil {
		return c.Job(), err
	}
	typ, _ := ArtifactType(job.JobType)
	cid := job.ProjectID
	if cid == "" {
		cid = c.q.cfg.Project
	}
	var art artifact.Artifact
	sctx, err = c.step(ctx, func(ctx context.Context) (err error) {
		art, _, err = c.q.artifacts.Create(ctx, c.q.cfg.ArtifactActor, cid, artifact.Draft{
			JobID: job.JobID, RunID: job.RunID, Type: typ, AgentSlug: job.AgentSlug,
			EntityRefs: out.EntityRefs, Tags: out.Tags, Content: out.Content, Sources: out.Sources,
		})
		if err == nil && !art.Finalized {
			err = fmt.Errorf("%w: %s", artifact.ErrNotFinalized, art.ArtifactID)
		}
		return err
	})
	if err != nil {
		return orchestrate(JobArtifactWrite, sctx, err)
	}
	err = c.move(ctx, EventCommit, func(d *jobDoc) {
		d.ArtifactID, d.Error, d.ErrorCode, d.FailedStep, d.Lease = art.ArtifactID, nil, "", "", nil
	})
	if err != nil && !errors.Is(err, ErrLeaseLost) && ctx.Err() == nil {
		// The commit itself failed (a store error): a write error of
		// ARTIFACT_WRITE, retried like any other.
		return orchestrate(JobArtifactWrite, ctx, err)
	}
	return c.Job(), err
}
