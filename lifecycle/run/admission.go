package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// admission moves runs from queued towards executing, and every run at
// rest on: the loop's poll looks at the runs not yet terminal and hands
// each to consider, as it does the runs handed over by Submit and control
// calls. It remembers, for the runs the last poll could only watch, until
// when the next polls need not read them (quiet), and the runs the last
// poll listed (listed), so a poll tells new work from runs it saw before.
// Only the loop touches them.
type admission struct {
	store        *storage.Store
	now          func() time.Time
	log          *slog.Logger
	owner        string        // Config.Owner
	parkedPoll   time.Duration // Config.ParkedPollInterval
	queueTimeout time.Duration // Config.QueueTimeout
	absent       *evidence.Absence
	cat          *catalog
	statuses     *statuses
	writers      *writers
	history      *history
	audit        *auditLog
	gate         *dedupeGate
	slots        *slots
	claims       *claims
	execs        *executions
	takeover     *takeover
	ender        *ender
	inbox        *inbox

	quiet  map[string]time.Time
	listed map[string]bool
}

// considerHanded looks at the runs handed to the loop; one this runner
// still executes is looked at again when that execution ends.
func (a *admission) considerHanded(ctx context.Context) {
	for _, c := range a.inbox.take() {
		if !a.execs.holdIfBusy(c.w.runID, c) {
			a.consider(ctx, c, false)
		}
	}
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
func (a *admission) poll(ctx context.Context, startup bool) (found bool) {
	now := a.now()
	a.history.maybeRepairIndexes(ctx, now)
	quiet := make(map[string]time.Time, len(a.quiet))
	listed := make(map[string]bool, len(a.listed))
	defer func() { a.quiet, a.listed = quiet, listed }()
	for key, err := range a.store.List(ctx, layout.RunActivePrefix) {
		if err != nil {
			if ctx.Err() == nil {
				a.log.LogAttrs(ctx, slog.LevelError, "poll_failed", slog.String("error", err.Error()))
			}
			return
		}
		slug, runID, ok := layout.ParseRunActiveKey(key)
		if !ok {
			continue
		}
		listed[runID] = true
		if a.execs.isExecuting(runID) || a.slots.isWaiting(slug, runID) {
			continue
		}
		if _, known := a.cat.agents[slug]; !known {
			continue // another service's agent
		}
		if until, ok := a.quiet[runID]; ok && now.Before(until) {
			quiet[runID] = until
			continue
		}
		statusKey, err := layout.RunStatusKey(slug, runID)
		if err != nil {
			continue
		}
		doc, ver, err := a.statuses.read(ctx, slug, runID, statusKey)
		if errors.Is(err, storage.ErrNotFound) && !errors.Is(err, lifecycle.ErrCorrupt) {
			// Its submit has not written the status yet, or stopped
			// half-way: finished once it had a lease's time, and (on a
			// store that settles) once a read Settle later still finds
			// no status, since finishing writes the status create-only,
			// which such a store may take over the run's own.
			if a.absent.Confirmed(statusKey, now) {
				a.takeover.finishSubmit(ctx, slug, runID, statusKey)
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return // the pass is over; the next one goes on
			}
			if !errors.Is(err, lifecycle.ErrCorrupt) { // quarantined: logged there
				a.log.LogAttrs(ctx, slog.LevelError, "poll_failed", slog.String("runId", runID), slog.String("error", err.Error()))
			}
			continue
		}
		found = found || !a.listed[runID]
		a.consider(ctx, candidate{slug: slug, w: a.writers.newWriter(slug, runID, statusKey, &doc, ver)}, startup)
		if until := a.quietUntil(a.cat.flowOfDoc(&doc), &doc, now); !until.IsZero() {
			quiet[runID] = until
		}
	}
	a.claims.forgetUnsure(listed)
	for _, list := range a.slots.takeWaiting() {
		for _, c := range list {
			a.consider(ctx, c, false)
		}
	}
	return found
}

// quietUntil is until when a run that consider left alone cannot need
// this runner: the end of another runner's live lease; for a parked run
// ParkedPollInterval or its external deadline, whichever comes first; for
// a keyed run waiting out the store's settle time before it may go, the
// end of that wait. Zero means it should be read at every poll.
func (a *admission) quietUntil(f *flow, doc *lifecycle.RunStatus, now time.Time) time.Time {
	if until := a.gate.waitEnds(f, doc); now.Before(until) {
		return until
	}
	switch {
	case f.executing(doc.Status) && doc.Lease != nil && doc.Lease.Owner != a.owner && !now.After(doc.Lease.ExpiresAt):
		return doc.Lease.ExpiresAt
	case doc.Lease == nil && slices.Contains(f.parked, doc.Status):
		until := now.Add(a.parkedPoll)
		if doc.External != nil && doc.External.Deadline != nil && doc.External.Deadline.Before(until) {
			until = *doc.External.Deadline
		}
		return until
	}
	return time.Time{}
}

// consider moves one run forward as far as this runner can: admit it, start
// it if a slot is free, take it over if its runner was lost, expire its
// external wait, or clean up after it.
func (a *admission) consider(ctx context.Context, c candidate, startup bool) {
	doc := c.w.snapshot()
	f := a.cat.flowOfDoc(&doc)
	if a.execs.isExecuting(doc.RunID) {
		return // this runner has it; a stale copy must not start it twice
	}
	if !a.gate.mayGo(ctx, c, f, &doc) {
		return // not yet decided, or a duplicate ended here
	}
	now := a.now()
	var err error
	if f.terminal(doc.Status) || (doc.Lease == nil && slices.Contains(f.parked, doc.Status)) {
		if !a.repairAudit(ctx, &doc) {
			return
		}
	}
	switch {
	case f.terminal(doc.Status):
		// Its writer may have died between the terminal write and the
		// index move: repair the entries before the active entry goes.
		if err := a.history.repairRunIndex(ctx, &doc); err != nil {
			a.history.repairFailed(ctx, err)
			return
		}
		a.history.noteGap(doc.RunID, false)
		a.ender.cleanup(ctx, c.slug, doc.RunID, "", "")
		return
	case doc.Status == f.initial && f.admit != "":
		err = a.admit(ctx, c, f)
	case doc.Status == f.waiting && a.queueExpired(f, doc, now):
		err = a.expireQueued(ctx, c, f, doc.RunID)
	case doc.Status == f.waiting:
		a.claims.startOrWait(ctx, c, false)
		return
	case f.executing(doc.Status):
		a.takeover.resumeExecuting(ctx, c, &doc, now, startup)
		return
	case doc.CancelRequested && f.cancel != "" && doc.Lease == nil && slices.Contains(f.parked, doc.Status):
		err = a.cancelParked(ctx, c, f, doc.RunID)
	case externalExpired(&doc, now):
		err = a.expireExternal(ctx, c, f, &doc)
	}
	if err != nil && ctx.Err() == nil {
		a.log.LogAttrs(ctx, slog.LevelWarn, "run_not_advanced", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
	}
}

// repairAudit writes the audit event of the last write of a run at rest,
// if that write's own audit failed: no writer may come soon to do it. It
// reports false when the repair failed and the look must stop.
func (a *admission) repairAudit(ctx context.Context, doc *lifecycle.RunStatus) bool {
	if err := a.audit.ensure(ctx, doc); err != nil {
		if ctx.Err() == nil {
			a.log.LogAttrs(ctx, slog.LevelWarn, "audit_repair_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
		}
		return false
	}
	return true
}

// admit moves a new run past the flow's admission and starts it or queues
// it for a slot.
func (a *admission) admit(ctx context.Context, c candidate, f *flow) error {
	err := c.w.apply(ctx, bySystem(), func(ctx context.Context, d *lifecycle.RunStatus) error {
		return f.fire(ctx, d, f.admit, lifecycle.ActorOrchestration)
	})
	if err == nil {
		a.claims.startOrWait(ctx, c, false)
	}
	return err
}

// expireQueued fails a run that waited for a slot longer than the queue
// timeout.
func (a *admission) expireQueued(ctx context.Context, c candidate, f *flow, runID string) error {
	err := c.w.apply(ctx, byTimeout(), func(ctx context.Context, d *lifecycle.RunStatus) error {
		if err := f.fire(ctx, d, f.fail, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		a.ender.finishFields(d, lifecycle.NewRunError(codes.AgentTimeout, "queued longer than %s", seconds(a.queueTimeout)))
		return nil
	})
	if err == nil {
		a.ender.cleanup(ctx, c.slug, runID, "", "")
		a.ender.finished(ctx, c.w.snapshot())
	}
	return err
}

// cancelParked ends canceled a parked run that carries an acknowledged
// cancel (parked by a writer that missed the request).
func (a *admission) cancelParked(ctx context.Context, c candidate, f *flow, runID string) error {
	err := c.w.apply(ctx, bySystem(), func(ctx context.Context, d *lifecycle.RunStatus) error {
		if !d.CancelRequested || d.Lease != nil || !slices.Contains(f.parked, d.Status) {
			return nil // moved on meanwhile
		}
		ag, _ := a.cat.agent(d.AgentSlug)
		return cancelOrCompensate(ctx, f, d, ag, lifecycle.ActorOrchestration, a.ender)
	})
	if err == nil {
		if after := c.w.snapshot(); f.terminal(after.Status) {
			a.ender.cleanup(ctx, c.slug, runID, "", "")
			a.ender.finished(ctx, after)
		}
	}
	return err
}

// expireExternal fails a run whose external event did not come by its
// deadline.
func (a *admission) expireExternal(ctx context.Context, c candidate, f *flow, doc *lifecycle.RunStatus) error {
	ext := doc.External
	b := byTimeout()
	b.tc.External = &lifecycle.ExternalWait{} // filled from the document written
	err := c.w.apply(ctx, b, func(ctx context.Context, d *lifecycle.RunStatus) error {
		ag, _ := a.cat.agent(d.AgentSlug)
		return failOrCompensate(ctx, f, d, ag, lifecycle.ActorOrchestration, f.fail,
			lifecycle.NewRunError(codes.AgentTimeout, "external event %s not received by %s", ext.EventType, ext.Deadline.Format("2006-01-02T15:04:05Z07:00")), a.ender)
	})
	if err == nil && f.terminal(c.w.snapshot().Status) {
		a.ender.cleanup(ctx, c.slug, doc.RunID, "", "")
		a.ender.finished(ctx, c.w.snapshot())
	}
	return err
}

// queueExpired tells whether a waiting run outlived QueueTimeout and its
// machine can fail it from there.
func (a *admission) queueExpired(f *flow, doc lifecycle.RunStatus, now time.Time) bool {
	return a.queueTimeout > 0 && now.Sub(doc.StartedAt) > a.queueTimeout &&
		f.check(doc.Status, "failed") == nil
}

// externalExpired reports whether doc waits for an external event whose
// deadline has passed.
func externalExpired(doc *lifecycle.RunStatus, now time.Time) bool {
	return doc.Status == string(machine.ApprovalWaitingExternal) && doc.External != nil && doc.External.Deadline != nil && now.After(*doc.External.Deadline)
}

func derefTime[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// On a store that settles (storage.SettleTime > 0) a create-only write of
// an idempotency record may land over an existing one: two first submits
// of a key both "create" it, or a late retry replaces a completed record,
// and each creates a run of its own. The record cannot tell; so each run a
// record names also gets a marker of its own key (IdempotencyRunKey),
// which no other run's write can replace, and before a run with a key is
// first executed, at least Settle after its creation, the key's markers
// are read: only the earliest run of the live generation executes. A
// loser ends failed IDEMPOTENCY_DUPLICATE, naming the winner; its marker is
// quarantined, and the record repaired to the winner. On a store that
// settles at once none of this is written or read.

// dedupeGate lets a keyed run execute only once it is its key's one run,
// on a store that settles (see above); on one that settles at once it
// writes and reads nothing. It remembers the runs found to be their key's
// one run (verdicts) until they are past admission.
type dedupeGate struct {
	store        *storage.Store
	now          func() time.Time
	log          *slog.Logger
	settle       time.Duration // the store's settle time, read once: every check agrees
	completedTTL time.Duration // Config.IdempotencyCompletedTTL
	verdicts     *verdicts
	ender        *ender
	statuses     *statuses
	poison       *poison
	reads        *reads
}

// verdicts are the runs with an idempotency key found to be their key's
// one run, on a store that settles. The gate decides them; the end of a
// run forgets its verdict.
type verdicts struct {
	mu sync.Mutex
	ok map[string]bool
}

func newVerdicts() *verdicts { return &verdicts{ok: map[string]bool{}} }

func (v *verdicts) won(runID string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ok[runID]
}

func (v *verdicts) set(runID string) {
	v.mu.Lock()
	v.ok[runID] = true
	v.mu.Unlock()
}

func (v *verdicts) forget(runID string) {
	v.mu.Lock()
	delete(v.ok, runID)
	v.mu.Unlock()
}

// mayGo tells whether a run that has not executed yet may go on:
// always on a store that settles at once or for a run without a key;
// otherwise once, at least Settle after its creation, its key's markers
// name it the winner. A run that lost is ended here.
func (g *dedupeGate) mayGo(ctx context.Context, c candidate, f *flow, doc *lifecycle.RunStatus) bool {
	settle := g.settle
	if settle <= 0 || doc.IdempotencyKey == "" {
		return true
	}
	if !gated(f, doc) {
		g.verdicts.forget(doc.RunID) // past admission: the verdict is no longer needed
		return true
	}
	if g.verdicts.won(doc.RunID) {
		return true
	}
	if g.now().Before(doc.StartedAt.Add(settle)) {
		return false // a rival's marker may not read yet: a poll at the wait's end decides
	}
	winner, err := g.winner(ctx, doc)
	if err != nil {
		g.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_check_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
		return false
	}
	if winner.RunID == doc.RunID {
		g.verdicts.set(doc.RunID)
		return true
	}
	if err := g.loseDuplicate(ctx, c, f, doc, winner); err != nil && ctx.Err() == nil {
		g.log.LogAttrs(ctx, slog.LevelWarn, "run_not_advanced", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
	}
	return false
}

// gated tells whether a keyed run has not executed yet: the gate decides
// whether it may.
func gated(f *flow, doc *lifecycle.RunStatus) bool {
	return doc.IdempotencyKey != "" && doc.Lease == nil && (doc.Status == f.initial || doc.Status == f.waiting)
}

// waitEnds is when a keyed run the gate holds may be decided: the
// end of the settle time after its creation. Zero when the gate does not
// hold it, so the poll need not read it again before then.
func (g *dedupeGate) waitEnds(f *flow, doc *lifecycle.RunStatus) time.Time {
	settle := g.settle
	if settle <= 0 || !gated(f, doc) || g.verdicts.won(doc.RunID) {
		return time.Time{}
	}
	return doc.StartedAt.Add(settle)
}

// winner reads the markers of doc's key and returns the earliest live
// one: not replaced by a later generation, and live when doc's generation
// started. A run without a marker of its own (written by an earlier
// release) competes as created when it started.
func (g *dedupeGate) winner(ctx context.Context, doc *lifecycle.RunStatus) (idemrecord.Marker, error) {
	self := idemrecord.Marker{Key: doc.IdempotencyKey, RunID: doc.RunID, CreatedAt: doc.StartedAt,
		ExpiresAt: doc.StartedAt.Add(g.completedTTL)}
	var markers []idemrecord.Marker
	replaced := map[string]bool{}
	for key, err := range g.store.List(ctx, layout.IdempotencyRunsPrefix(doc.IdempotencyKey)) {
		if err != nil {
			return self, err
		}
		if _, ok := layout.ParseIdempotencyRunKey(key); !ok {
			continue
		}
		m, _, err := records.Read[idemrecord.Marker](ctx, g.store, key)
		if errors.Is(err, lifecycle.ErrCorrupt) {
			continue // a quarantine's tombstone, or not a marker
		}
		if errors.Is(err, storage.ErrNotFound) {
			// Listed but read missing: quarantined meanwhile, or a false
			// not-found. Not decided on that: the next poll looks again.
			return self, fmt.Errorf("marker %s listed, read missing: %w", key, err)
		}
		if err != nil {
			return self, err
		}
		if m.RunID == doc.RunID {
			self = m
		}
		markers = append(markers, m)
		if m.Replaces != "" {
			replaced[m.Replaces] = true
		}
	}
	winner := self
	for _, m := range markers {
		if replaced[m.RunID] || !self.CreatedAt.Before(m.ExpiresAt) {
			continue
		}
		if m.CreatedAt.Before(winner.CreatedAt) || (m.CreatedAt.Equal(winner.CreatedAt) && m.RunID < winner.RunID) {
			winner = m
		}
	}
	return winner, nil
}

// earlier tells whether a live run of c's key was created before c's new
// generation, as its markers read now: then that run, not c's, is the
// key's. A listing may not show a rival's marker yet; the gate decides
// such a pair before either executes. A failed read answers no (the run
// is created, and the gate decides).
func (g *dedupeGate) earlier(ctx context.Context, c *idemClaim) (idemrecord.Marker, bool) {
	if g.settle <= 0 {
		return idemrecord.Marker{}, false
	}
	w, err := g.winner(ctx, &lifecycle.RunStatus{RunID: c.rec.RunID, IdempotencyKey: c.rec.Key, StartedAt: c.rec.CreatedAt})
	if err != nil || w.RunID == c.rec.RunID {
		return w, false
	}
	return w, true
}

// dropMarker deletes the marker of c's run, which was never created: an
// earlier run holds the key (earlier). Left, it would only be read by
// the gate and lose; a failure to delete is not worth a log line.
func (g *dedupeGate) dropMarker(ctx context.Context, c *idemClaim) {
	if key, err := layout.IdempotencyRunKey(c.rec.Key, c.rec.RunID); err == nil {
		_ = g.store.Delete(ctx, key, storage.Condition{})
	}
}

// loseDuplicate ends a run that lost its key to winner: failed (canceled
// on a machine with no failed move from its state) with
// IDEMPOTENCY_DUPLICATE naming the winner, so its submit's answer still
// names a run that finishes; then the record is repaired to the winner
// and the loser's marker goes to quarantine.
func (g *dedupeGate) loseDuplicate(ctx context.Context, c candidate, f *flow, doc *lifecycle.RunStatus, winner idemrecord.Marker) error {
	event := f.fail
	if _, ok := f.target(doc.Status, event); !ok {
		event = f.cancel
	}
	err := c.w.apply(ctx, bySystem(), func(ctx context.Context, d *lifecycle.RunStatus) error {
		if err := f.fire(ctx, d, event, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		g.ender.finishFields(d, lifecycle.NewRunError(codes.IdempotencyDuplicate, "run %s duplicates run %s under idempotency key %s (the store accepted a second create of the key's record); it was not executed",
			d.RunID, winner.RunID, d.IdempotencyKey))
		return nil
	})
	if err != nil {
		return err
	}
	g.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_duplicate_run", slog.String("runId", doc.RunID),
		slog.String("winner", winner.RunID), slog.String("key", doc.IdempotencyKey))
	g.ender.cleanup(ctx, c.slug, doc.RunID, "", "")
	g.ender.finished(ctx, c.w.snapshot())
	// The record first: it is what a retry of the key is answered.
	g.repairRecord(ctx, doc, winner)
	g.quarantineMarker(ctx, doc, winner)
	return nil
}

// quarantineMarker moves a losing run's marker under quarantine/, where an
// operator finds it with its reason.
func (g *dedupeGate) quarantineMarker(ctx context.Context, doc *lifecycle.RunStatus, winner idemrecord.Marker) {
	key, err := layout.IdempotencyRunKey(doc.IdempotencyKey, doc.RunID)
	if err != nil {
		return
	}
	data, ver, err := g.store.Get(ctx, key)
	if err != nil {
		if !errors.Is(err, storage.ErrNotFound) {
			g.log.LogAttrs(ctx, slog.LevelWarn, "quarantine_failed", slog.String("key", key), slog.String("error", err.Error()))
		}
		return
	}
	_, _ = g.poison.quarantine(ctx, &lifecycle.QuarantinedError{Key: key, Version: string(ver), Data: data,
		Reason: fmt.Sprintf("run %s was created a second time under its idempotency key; run %s executes", doc.RunID, winner.RunID)})
}

// repairRecord points the key's record at the winner again, when it names
// the loser: completed if the winner's run exists, else processing with a
// lapsed lease, so the next submit of the winner's request creates it. It
// tells whether the winner's run exists.
func (g *dedupeGate) repairRecord(ctx context.Context, doc *lifecycle.RunStatus, winner idemrecord.Marker) bool {
	winnerExists := false
	if slug, statusKey, err := g.reads.locate(ctx, winner.RunID); err == nil {
		_, _, err = g.statuses.read(ctx, slug, winner.RunID, statusKey)
		winnerExists = err == nil
	}
	_, _, err := (&fence.Record[idemrecord.Record, *idemrecord.Record]{Store: g.store, Key: layout.IdempotencyKey(doc.IdempotencyKey)}).Apply(ctx, func(cur *idemrecord.Record) error {
		if cur.RunID != doc.RunID {
			return errKeep
		}
		now := g.now()
		cur.RunID, cur.CreatedAt, cur.UpdatedAt, cur.PreviousRunID = winner.RunID, winner.CreatedAt, now, winner.Replaces
		if winner.RequestHash != "" {
			cur.RequestHash = winner.RequestHash
		}
		cur.LeaseOwner, cur.LeaseExpiresAt, cur.LockExpiresAt = "", nil, nil
		if winnerExists {
			cur.Status, cur.ExpiresAt = idemrecord.Completed, now.Add(g.completedTTL)
			cur.Response, _ = json.Marshal(map[string]string{"run_id": winner.RunID})
		} else {
			lapsed := now
			cur.Status, cur.Response, cur.LeaseExpiresAt = idemrecord.Processing, nil, &lapsed
		}
		return nil
	})
	if err != nil && !errors.Is(err, errKeep) && !errors.Is(err, storage.ErrNotFound) {
		g.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_record_update_failed", slog.String("key", doc.IdempotencyKey), slog.String("error", err.Error()))
	}
	return winnerExists
}
