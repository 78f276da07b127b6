package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
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
	var traceParent, tenant string
	tried := &unsureClaim{}
	err := c.w.apply(ctx, bySystem(), func(ctx context.Context, d *lifecycle.RunStatus) error {
		now := cl.now()
		traceParent, tenant = d.TraceParent, d.TenantID
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
		cl.nameFirstStep(d)
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
	x.traceParent, x.tenant = traceParent, tenant
	return nil
}

// nameFirstStep names in current_step the step the claimed execution
// starts with: the claim is the execution's first write, so a run polled
// or failing in its first step names it, and a run resumed after a wait
// names the step after the wait (docs/spec.md#run-status). A count names
// each later step (the next one, as it is about to start). A graph
// agent's steps run side by side: its first claim names step 1 (a root,
// started first), its counts the latest started.
func (cl *claims) nameFirstStep(d *lifecycle.RunStatus) {
	a, ok := cl.cat.agent(d.AgentSlug)
	if !ok || len(a.Steps) == 0 || (a.graph != nil && d.CurrentStep != "") {
		return
	}
	d.CurrentStep = a.Steps[min(d.StepsCompleted, len(a.Steps)-1)].Name
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

// slots are the agents' concurrency slots in the store, and the runs that
// wait here for one: a run executes only while it holds a slot of its
// agent. This runner remembers the slots its executions hold (held) and
// the version of each it freed (freed), so taking one again is one
// compare-and-swap without a read.
type slots struct {
	store    *storage.Store
	now      func() time.Time
	log      *slog.Logger
	cat      *catalog
	statuses *statuses
	absent   *evidence.Absence
	poison   *poison
	execs    *executions
	inbox    *inbox

	mu      sync.Mutex
	waiting map[string][]candidate // by agent
	freed   map[string]storage.Version
	held    map[string]string // slot key -> run id
}

// wait queues c until a slot of its agent frees.
func (s *slots) wait(c candidate) {
	s.mu.Lock()
	s.waiting[c.slug] = append(s.waiting[c.slug], c)
	s.mu.Unlock()
}

// takeWaiting empties the queues of runs waiting for a slot.
func (s *slots) takeWaiting() map[string][]candidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waiting
	s.waiting = map[string][]candidate{}
	return w
}

// freeRun frees what a quarantined run held here: its execution is stopped
// (its finish frees its slot), or else every slot that names it.
func (s *slots) freeRun(ctx context.Context, slug, runID string, cause error) {
	if !s.execs.stop(runID, cause) {
		s.freeAllOf(ctx, slug, runID)
	}
}

// acquire takes one of the agent's concurrency slots for runID: one this
// runner freed (a compare-and-swap on the version it wrote, no read), a new
// one (create-only), the one the run already holds (an orphan's), a freed
// one, or one whose run no longer executes. Slots are freed by writing an
// empty holder, never deleted: S3 compare-and-swap writes are atomic where a
// conditional delete on MinIO is not.
func (s *slots) acquire(ctx context.Context, slug, runID string) (string, storage.Version, error) {
	n := s.cat.agents[slug].concurrency
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
	s.mu.Lock()
	var open []string
	for _, key := range keys {
		if _, held := s.held[key]; !held {
			open = append(open, key)
		}
	}
	s.mu.Unlock()
	if len(open) == 0 {
		return "", "", errNoSlot
	}
	take := func(key string, v storage.Version) (string, storage.Version, error) {
		s.mu.Lock()
		s.held[key] = runID
		s.mu.Unlock()
		return key, v, nil
	}
	for _, key := range open {
		s.mu.Lock()
		v, ok := s.freed[key]
		delete(s.freed, key)
		s.mu.Unlock()
		if !ok {
			continue
		}
		if v, err := s.store.Put(ctx, key, body, storage.IfMatch(v)); err == nil {
			return take(key, v)
		}
	}
	for _, key := range open {
		v, err := s.store.Put(ctx, key, body, storage.IfNotExists())
		if err == nil {
			return take(key, v)
		}
		if !errors.Is(err, storage.ErrPreconditionFailed) {
			return "", "", err
		}
	}
	for _, key := range open {
		e, v, err := s.read(ctx, key) // a junk slot is quarantined: not found
		if errors.Is(err, storage.ErrNotFound) {
			if v, err := s.store.Put(ctx, key, body, storage.IfNotExists()); err == nil {
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
		if e.RunID == runID || e.RunID == "" || s.holderGone(ctx, slug, e.RunID) {
			if v, err := s.store.Put(ctx, key, body, storage.IfMatch(v)); err == nil {
				return take(key, v)
			}
		}
	}
	return "", "", errNoSlot
}

// holderGone tells whether the run holding a slot no longer executes
// (it ended, parked, or never started), so the slot may be taken.
func (s *slots) holderGone(ctx context.Context, slug, runID string) bool {
	if s.execs.isExecuting(runID) {
		return false
	}
	key, err := layout.RunStatusKey(slug, runID)
	if err != nil {
		return true
	}
	doc, _, err := s.statuses.read(ctx, slug, runID, key)
	if errors.Is(err, lifecycle.ErrCorrupt) {
		return true // poison and quarantined
	}
	if errors.Is(err, storage.ErrNotFound) {
		// Gone; on a store that settles, once a read Settle later agrees.
		return s.absent.Confirmed(key, s.now())
	}
	if err != nil {
		return false
	}
	f := s.cat.flowOfDoc(&doc)
	return !f.executing(doc.Status) || doc.Lease == nil
}

// release frees a slot this runner holds at version v, unless another
// runner took it meanwhile, and wakes the next run waiting for one.
func (s *slots) release(ctx context.Context, slug, key string, v storage.Version) {
	if key == "" {
		return
	}
	s.mu.Lock()
	delete(s.held, key)
	s.mu.Unlock()
	free, err := s.store.Put(ctx, key, slotBody(""), storage.IfMatch(v))
	switch {
	case err == nil:
		s.mu.Lock()
		s.freed[key] = free
		s.mu.Unlock()
	case !errors.Is(err, storage.ErrPreconditionFailed):
		s.log.LogAttrs(ctx, slog.LevelWarn, "slot_release_failed", slog.String("slot", key), slog.String("error", err.Error()))
	}
	s.mu.Lock()
	next := s.waiting[slug]
	if len(next) > 0 {
		s.waiting[slug] = next[1:]
	}
	s.mu.Unlock()
	if len(next) > 0 {
		s.inbox.hand(next[0])
	}
}

// freeAllOf frees every slot of the agent that names runID.
func (s *slots) freeAllOf(ctx context.Context, slug, runID string) {
	a, ok := s.cat.agents[slug]
	if !ok {
		return
	}
	for i := range a.concurrency {
		key, err := layout.RunSlotKey(slug, i)
		if err != nil {
			return
		}
		e, v, err := s.read(ctx, key)
		if err != nil || e.RunID != runID {
			continue
		}
		s.release(ctx, slug, key, v)
	}
}

// read reads and validates a slot object; a junk one is quarantined
// and reported as not found, so the slot can be created afresh.
func (s *slots) read(ctx context.Context, key string) (slotEntry, storage.Version, error) {
	b, v, err := s.store.Get(ctx, key)
	if err != nil {
		return slotEntry{}, "", err
	}
	var e slotEntry
	var ce *lifecycle.QuarantinedError
	if err := json.Unmarshal(b, &e); err != nil {
		ce = &lifecycle.QuarantinedError{Key: key, Version: string(v), Data: b, Reason: "cannot decode", Err: err}
	} else if e.RunID != "" {
		if err := storekey.ValidateID("run id", e.RunID); err != nil {
			ce = &lifecycle.QuarantinedError{Key: key, Version: string(v), Data: b, Reason: "invalid", Err: err}
		}
	}
	if ce != nil {
		if _, qerr := s.poison.quarantine(ctx, ce); qerr != nil {
			return slotEntry{}, "", qerr
		}
		return slotEntry{}, "", fmt.Errorf("%w: slot %s quarantined", storage.ErrNotFound, key)
	}
	return e, v, nil
}

// releaseHeld frees the slot an execution holds.
func (s *slots) releaseHeld(ctx context.Context, x *execution) {
	s.release(ctx, x.agent.Slug, x.slotKey, x.slotVer)
}

func (s *slots) isWaiting(slug, runID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.waiting[slug] {
		if c.w.runID == runID {
			return true
		}
	}
	return false
}

// slotEntry is the body of a slot: the run holding it, empty when free.
// Token is drawn afresh for every write: slots are fenced by compare-and-swap
// on their version, and on S3 a version is the MD5 of the bytes, so two
// writes of the same holder must still differ in their bytes (else a lost
// runner's release could match a version written after it).
type slotEntry struct {
	RunID string `json:"run_id"`
	Token string `json:"token,omitempty"`
}

// slotBody encodes a slot held by runID ("" for a free slot) with a fresh
// token.
func slotBody(runID string) []byte {
	var t [8]byte
	_, _ = rand.Read(t[:]) // crypto/rand.Read never fails (Go 1.24+).
	b, _ := json.Marshal(slotEntry{RunID: runID, Token: hex.EncodeToString(t[:])})
	return b
}

var errNoSlot = errors.New("run: no free slot")

// executions are the runs this runner executes now, by run id: the one
// place that knows whether a run is this runner's, so a stale copy of a
// run is never started twice and a cancel reaches the steps at once.
type executions struct {
	inbox *inbox

	mu        sync.Mutex
	executing map[string]*execution
	// rehand holds runs handed over (a Deliver, an Approve) while this
	// runner was still ending their previous execution (parking them): they
	// are handed again the moment that execution ends, not at the next poll.
	rehand map[string]candidate
}

func newExecutions(in *inbox) *executions {
	return &executions{inbox: in, executing: map[string]*execution{}, rehand: map[string]candidate{}}
}

func (ex *executions) isExecuting(runID string) bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	_, ok := ex.executing[runID]
	return ok
}

// register makes x the execution of runID, unless one is registered
// already (a stale copy of a run this runner executes): then false.
func (ex *executions) register(runID string, x *execution) bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if _, busy := ex.executing[runID]; busy {
		return false
	}
	ex.executing[runID] = x
	return true
}

// unregister forgets the execution of runID, and hands the run over again
// if that was asked for while it executed.
func (ex *executions) unregister(runID string) {
	ex.mu.Lock()
	delete(ex.executing, runID)
	c, again := ex.rehand[runID]
	delete(ex.rehand, runID)
	ex.mu.Unlock()
	if again {
		ex.inbox.hand(c)
	}
}

// holdIfBusy keeps c, handed over (a Deliver, an Approve) while this
// runner still ends the run's last execution (it parks), to hand it again
// when that execution ends; false when the run is not executing here.
func (ex *executions) holdIfBusy(runID string, c candidate) bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if _, busy := ex.executing[runID]; !busy {
		return false
	}
	ex.rehand[runID] = c
	return true
}

// stop stops the execution of runID with cause, and tells whether there
// was one.
func (ex *executions) stop(runID string, cause error) bool {
	ex.mu.Lock()
	x := ex.executing[runID]
	ex.mu.Unlock()
	if x == nil {
		return false
	}
	x.stop(cause)
	return true
}

// The lease, once a claim landed, is its status writer's: held (every
// later write fenced on it and renewing it), and confirmed before the side
// writes of the execution.

// hold makes the writer the lease holder at epoch, with the document just
// written by its claim: from now on every write is fenced.
func (w *statusWriter) hold(epoch int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	doc, ver := w.rec.Snapshot()
	rec := w.ws.statusRecord(w.slug, w.runID, w.key, w.ws.owner, epoch)
	rec.Seed(doc, ver)
	w.rec, w.epoch = rec, epoch
	w.leaseUntil, w.renewedAt = doc.Lease.ExpiresAt, *doc.LastHeartbeatAt
}

// renewed is when this writer last renewed its lease.
func (w *statusWriter) renewed() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.renewedAt
}

// leaseValid tells, without I/O, whether this writer's lease is certainly
// still its own: the expiry it last wrote, less a tenth for safety, is
// ahead. No other runner takes a run over before the lease expires.
func (w *statusWriter) leaseValid() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fence.LeaseCertain(w.leaseUntil, w.ws.now(), w.ws.lease)
}

// confirmLease makes sure the lease is this writer's at this instant: by
// time while leaseValid vouches for it, else by a fenced read. Side writes
// call it after observing the object they replace (see writeOutput), so
// that no newer owner can have written that object in between.
func (w *statusWriter) confirmLease(ctx context.Context) error {
	if w.leaseValid() {
		return nil
	}
	return w.record().Confirm(ctx)
}
