package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// agentLock is queue/agents/{agent}.json (layout.AgentLockKey): which worker runs the agent's job,
// under which fencing epoch, until when. It gives at most one running job
// per agent across every worker sharing the store.
type agentLock struct {
	lifecycle.Meta

	Agent     string    `json:"agent"`
	Owner     string    `json:"owner,omitempty"`
	Epoch     int64     `json:"epoch"`
	JobID     string    `json:"job_id,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

func (l *agentLock) free(now time.Time) bool { return l.Owner == "" || !now.Before(l.ExpiresAt) }

// locks is the agents' locks (queue/agents/{agent}.json): made at an
// agent's first enqueue, read (or taken from the copy a claim kept) and
// written by compare-and-swap, and released when a Worker stops.
type locks struct {
	store  *storage.Store
	clock  clock.Clock
	log    *slog.Logger
	sched  *scheduler
	quar   *quarantine
	settle time.Duration // storage.SettleTime of the store
	// absent holds the locks read missing while their lanes hold work, on
	// a store that settles, until the absence is sure (remakeMissing).
	absent *evidence.Absence
	// lost is set when a lock was lost or junk: the job it named, if any,
	// is in no lane and named by no lock, for a reconcile pass to find.
	lost *reconcileAsked

	mu      sync.Mutex
	agentAt time.Time // when the agents' locks were last listed
}

// ensureAgent makes sure agent's lock object exists.
func (q *locks) ensureAgent(ctx context.Context, agent string) error {
	if q.known(agent) {
		return nil
	}
	key, err := layout.AgentLockKey(agent)
	if err != nil {
		return err
	}
	// Read first: a lock another process (or an earlier life of this one)
	// made costs a read, not a refused write.
	missing, err := q.missing(ctx, agent, key)
	if err != nil || !missing {
		return err
	}
	fresh := q.fresh(agent)
	if _, err = records.Create(ctx, q.store, key, &fresh); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		return err
	}
	q.made(agent)
	return nil
}

// lockWrites is ensureAgent for a batch committed at once: the create-only
// writes of the locks of agents not known to exist and read as missing,
// to commit with the batch's jobs. The locks read as present are known to
// exist from then on; the caller calls made for each lock its commit made.
func (q *locks) lockWrites(ctx context.Context, agents []string) ([]storage.Write, error) {
	var ws []storage.Write
	for _, agent := range agents {
		key, err := layout.AgentLockKey(agent)
		if err != nil {
			return nil, err
		}
		missing, err := q.missing(ctx, agent, key)
		if err != nil {
			return nil, err
		}
		if !missing {
			continue
		}
		fresh := q.fresh(agent)
		w, err := records.CreateWrite(key, &fresh)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// stillMissing is the lock writes of ws whose locks are still missing, for
// a batch whose commit found one of its locks made by someone else.
func (q *locks) stillMissing(ctx context.Context, ws []storage.Write) ([]storage.Write, error) {
	out := make([]storage.Write, 0, len(ws))
	for _, w := range ws {
		missing, err := q.missing(ctx, lockAgent(w.Key), w.Key)
		if err != nil {
			return ws, err
		}
		if missing {
			out = append(out, w)
		}
	}
	return out, nil
}

// missing tells whether agent's lock, at key, is neither known to exist
// nor read as present now; one read as present is known from then on.
func (q *locks) missing(ctx context.Context, agent, key string) (bool, error) {
	if q.known(agent) {
		return false, nil
	}
	_, _, err := q.store.Get(ctx, key)
	switch {
	case err == nil:
		q.made(agent)
		return false, nil
	case errors.Is(err, storage.ErrNotFound):
		return true, nil
	}
	return false, err
}

// known tells whether agent's lock is known to exist.
func (q *locks) known(agent string) bool {
	a := q.sched.agent(agent)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lockExists
}

// made records that agent's lock exists.
func (q *locks) made(agent string) {
	a := q.sched.agent(agent)
	a.mu.Lock()
	a.lockExists = true
	a.mu.Unlock()
}

// fresh is a new lock of agent, free.
func (q *locks) fresh(agent string) agentLock {
	l := agentLock{Agent: agent}
	if q.settle > 0 {
		// A store that settles may take this create over a lock it
		// read as missing: the epoch starts from the clock, as a
		// remade lock's (readLock), so epochs still only grow.
		l.Epoch = q.clock.Now().UnixMilli()
	}
	return l
}

// lockCheckDue reports whether a's lock should be read for an orphan, at
// most once per every, and when it next should be. An agent whose lock
// this Queue last left free (or kept, its job settled) and whose lane
// listed empty several times in a row is checked less and less often, up
// to every<<maxLockShift: each check costs a read and a listing, and an
// idle Worker must not pay them twice per lease for every agent it knows.
// A lock another claim holds is checked every time, so its orphan is
// rescued within every of the lease's end; an orphan of a claim this Queue
// never saw waits for the sweep or the slower check.
func (a *agentState) lockCheckDue(s *lockSlot, now time.Time, every time.Duration) (bool, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.freed != nil {
		every <<= min(a.idle, maxLockShift)
	}
	if !s.lockAt.IsZero() && now.Sub(s.lockAt) < every && !now.Before(s.lockAt) {
		return false, s.lockAt.Add(every)
	}
	s.lockAt = now
	return true, now.Add(every)
}

// maxLockShift bounds the back-off of an idle agent's lock checks
// (lockCheckDue): at most every 4 leases (LeaseTTL/2<<3).
const maxLockShift = 3

// keep puts back the lock of slot s readLock took from the cache, unused.
func (a *agentState) keep(s *lockSlot, l *agentLock, ver storage.Version) {
	a.mu.Lock()
	if s.freed == nil {
		s.freed, s.freedVer = l, ver
	}
	a.mu.Unlock()
}

// releaseKept releases the agent locks this Queue's claims kept past their
// end (Claim.end), so other processes need not wait for them to lapse or
// read the jobs they name. A lock changed since is left alone.
func (q *locks) releaseKept(ctx context.Context) {
	for _, a := range q.sched.all() {
		a.mu.Lock()
		slots := a.allSlots()
		a.mu.Unlock()
		for _, s := range slots {
			q.releaseSlot(ctx, a, s)
		}
	}
}

// releaseSlot releases the lock of slot s of a if this Queue kept it.
func (q *locks) releaseSlot(ctx context.Context, a *agentState, s *lockSlot) {
	a.mu.Lock()
	l, ver := s.freed, s.freedVer
	if l != nil && l.Owner != "" {
		s.freed, s.freedVer = nil, ""
	} else {
		l = nil
	}
	a.mu.Unlock()
	if l == nil {
		return
	}
	key, err := layout.SlotLockKey(a.name, s.k)
	if err != nil {
		return
	}
	free := agentLock{Meta: l.Meta, Agent: a.name, Epoch: l.Epoch}
	if _, err := q.writeLock(ctx, key, &free, ver); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		q.log.WarnContext(ctx, "jobqueue: releasing agent lock", "agent", a.name, "slot", s.k, "err", err)
	}
}

// readLock returns a's lock: the copy this Queue freed (or kept) last,
// used once (cached), or else the stored one.
func (q *locks) readLock(ctx context.Context, a *agentState, s *lockSlot, key string) (lock agentLock, ver storage.Version, cached bool, err error) {
	a.mu.Lock()
	if s.freed != nil {
		lock, ver, cached = *s.freed, s.freedVer, true
		s.freed, s.freedVer = nil, ""
	}
	a.mu.Unlock()
	if cached {
		return lock, ver, true, nil
	}
	rec := &fence.Record[agentLock, *agentLock]{Store: q.store, Key: key, Validate: func(l *agentLock) error {
		if l.Agent != a.name {
			return fmt.Errorf("lock of agent %q at the key of %q", l.Agent, a.name)
		}
		return nil
	}}
	lock, ver, err = rec.Load(ctx)
	if err == nil {
		q.absent.Found(key) // read present: an earlier not-found is no evidence now
	}
	if err = q.quar.poison(ctx, err); err == nil || !errors.Is(err, lifecycle.ErrCorrupt) {
		return lock, ver, false, err
	}
	// The junk lock is in quarantine, and its epoch with it.
	fresh, ver, err := q.remake(ctx, a, s, key)
	if err != nil {
		return lock, "", false, err // ErrPreconditionFailed: another worker made it; next look reads it
	}
	q.lost.Store(true)
	return fresh, ver, false, nil
}

// remakeMissing makes a's lock again when it reads missing while a's lane
// holds work: a lock is made at the agent's first enqueue and never
// deleted, but a store can lose it (a MinIO cluster loses an object whose
// conditional write a killed process cut: docs/stores.md), and without it
// no claim takes the lane's jobs, for good. On a store that settles the
// absence must be sure first (read missing again a settle time later). The
// new lock's epoch starts from the clock, as a junk lock's (readLock), so
// epochs only grow. A create another process made first is refused, and
// the next look reads that one.
func (q *locks) remakeMissing(ctx context.Context, a *agentState, s *lockSlot, key string) {
	if !q.absent.Confirmed(key, q.clock.Now()) {
		return
	}
	if _, _, err := q.remake(ctx, a, s, key); err != nil {
		if !errors.Is(err, storage.ErrPreconditionFailed) {
			q.log.WarnContext(ctx, "jobqueue: remaking a missing agent lock failed", "agent", a.name, "err", err)
		}
		return
	}
	q.absent.Found(key)
	q.lost.Store(true)
	q.log.WarnContext(ctx, "jobqueue: agent lock read missing while its lane holds work; remade, and a reconcile pass asked for", "agent", a.name)
}

// remake creates a's lock afresh at key (create-only), in place of one
// quarantined or lost with its epoch. Epochs must only grow (they fence
// the lock's earlier holders), so the new one starts from the clock in
// milliseconds, beyond any count of claims, and above the last epoch this
// Queue saw for a.
func (q *locks) remake(ctx context.Context, a *agentState, s *lockSlot, key string) (agentLock, storage.Version, error) {
	epoch := q.clock.Now().UnixMilli()
	a.mu.Lock()
	if s.freed != nil && s.freed.Epoch >= epoch {
		epoch = s.freed.Epoch + 1
	}
	a.mu.Unlock()
	fresh := agentLock{Agent: a.name, Epoch: epoch}
	rec := &fence.Record[agentLock, *agentLock]{Store: q.store, Key: key}
	ver, err := rec.Create(ctx, fresh)
	if err != nil {
		return agentLock{}, "", err
	}
	fresh.Version = 1
	return fresh, ver, nil
}

// writeLock writes l at key if the lock is still at ver (putLock).
func (q *locks) writeLock(ctx context.Context, key string, l *agentLock, ver storage.Version) (storage.Version, error) {
	return putLock(ctx, q.store, key, l, ver)
}

// putLock is the one write of an agent lock over one that exists: if
// the stored lock is still at ver, it writes l as every record kind is
// rewritten (fence.Record's Apply): the Meta counter one up and the
// members l's Meta kept from the lock it came from (a newer release's)
// written back as read, so no write of the lock, by a claim, a release or
// the sweep, drops them. On success l is what was written.
func putLock(ctx context.Context, s *storage.Store, key string, l *agentLock, ver storage.Version) (storage.Version, error) {
	w, next, err := lockWrite(key, l, ver)
	if err != nil {
		return "", err
	}
	v, err := s.Put(ctx, key, w.Value, w.Cond)
	if err == nil {
		*l = next
	}
	return v, err
}

// lockWrite is putLock's write, for a commit: next is what it writes.
func lockWrite(key string, l *agentLock, ver storage.Version) (w storage.Write, next agentLock, err error) {
	next = *l
	next.Version++
	b, err := next.encode(make([]byte, 0, 256+len(l.Unknown)))
	if err != nil {
		return w, next, err
	}
	return storage.Write{Key: key, Value: b, Cond: storage.IfMatch(ver)}, next, nil
}

// refreshAgents lists the agents with a lock object, at most once per
// second, so that agents other processes enqueued for are looked at
// (agents this Queue enqueued for are known at once).
func (q *locks) refreshAgents(ctx context.Context) error {
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
		if name, k, ok := layout.ParseSlotLockKey(key); ok {
			a := q.sched.agent(name)
			a.mu.Lock()
			if k < maxLaneSlots { // a junk key's number makes no slot
				a.slot(k).lockExists = true
			}
			a.mu.Unlock()
		}
	}
	return nil
}

// makeSlot makes lock s of lane a, read missing, so a claim can take it
// (a lane of several locks makes them as its jobs first need them). On a
// store that settles, only once the absence is sure (remakeMissing): a
// create over a lock held would lose the job it names. A lock another
// process made first reads as ErrNotFound here: the next look reads it.
func (q *locks) makeSlot(ctx context.Context, a *agentState, s *lockSlot, key string) (agentLock, storage.Version, error) {
	if !q.absent.Confirmed(key, q.clock.Now()) {
		return agentLock{}, "", storage.ErrNotFound
	}
	fresh := q.fresh(a.name)
	rec := &fence.Record[agentLock, *agentLock]{Store: q.store, Key: key}
	ver, err := rec.Create(ctx, fresh)
	if errors.Is(err, storage.ErrPreconditionFailed) {
		return agentLock{}, "", storage.ErrNotFound
	}
	if err != nil {
		return agentLock{}, "", err
	}
	q.absent.Found(key)
	a.mu.Lock()
	s.lockExists = true
	a.mu.Unlock()
	fresh.Version = 1
	return fresh, ver, nil
}
