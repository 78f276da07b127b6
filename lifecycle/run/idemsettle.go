package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

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

// IdempotencyMarker is the marker of one run of a key, at
// idempotency/runs/{sha256 of the key}/{runId}.json, written create-only
// before the run on a store that settles. Every submit that creates the
// run writes the same document.
type IdempotencyMarker struct {
	lifecycle.Meta

	Key         string `json:"key"`
	RunID       string `json:"run_id"`
	RequestHash string `json:"request_hash"`
	// CreatedAt is the generation's start (the record's created_at),
	// ExpiresAt when it can no longer compete (created_at plus the
	// completed TTL); retention deletes the marker after it.
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Replaces is the run of the expired generation this one followed.
	Replaces string `json:"replaces,omitempty"`
}

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

// markRun writes the claim's run marker, on a store that settles.
func (g *dedupeGate) markRun(ctx context.Context, c *idemClaim) error {
	if g.settle <= 0 {
		return nil
	}
	key, err := layout.IdempotencyRunKey(c.rec.Key, c.rec.RunID)
	if err != nil {
		return err
	}
	m := IdempotencyMarker{Key: c.rec.Key, RunID: c.rec.RunID, RequestHash: c.rec.RequestHash, CreatedAt: c.rec.CreatedAt,
		ExpiresAt: c.rec.CreatedAt.Add(g.completedTTL), Replaces: c.rec.PreviousRunID}
	if _, err := records.Create(ctx, g.store, key, &m); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		return err
	}
	return nil
}

// mayGo tells whether a run that has not executed yet may go on:
// always on a store that settles at once or for a run without a key;
// otherwise once, at least Settle after its creation, its key's markers
// name it the winner. A run that lost is ended here.
func (g *dedupeGate) mayGo(ctx context.Context, c candidate, f *flow, doc *Status) bool {
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
func gated(f *flow, doc *Status) bool {
	return doc.IdempotencyKey != "" && doc.Lease == nil && (doc.Status == f.initial || doc.Status == f.waiting)
}

// waitEnds is when a keyed run the gate holds may be decided: the
// end of the settle time after its creation. Zero when the gate does not
// hold it, so the poll need not read it again before then.
func (g *dedupeGate) waitEnds(f *flow, doc *Status) time.Time {
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
func (g *dedupeGate) winner(ctx context.Context, doc *Status) (IdempotencyMarker, error) {
	self := IdempotencyMarker{Key: doc.IdempotencyKey, RunID: doc.RunID, CreatedAt: doc.StartedAt,
		ExpiresAt: doc.StartedAt.Add(g.completedTTL)}
	var markers []IdempotencyMarker
	replaced := map[string]bool{}
	for key, err := range g.store.List(ctx, layout.IdempotencyRunsPrefix(doc.IdempotencyKey)) {
		if err != nil {
			return self, err
		}
		if _, ok := layout.ParseIdempotencyRunKey(key); !ok {
			continue
		}
		m, _, err := records.Read[IdempotencyMarker](ctx, g.store, key)
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

// loseDuplicate ends a run that lost its key to winner: failed (canceled
// on a machine with no failed move from its state) with
// IDEMPOTENCY_DUPLICATE naming the winner, so its submit's answer still
// names a run that finishes; then the record is repaired to the winner
// and the loser's marker goes to quarantine.
func (g *dedupeGate) loseDuplicate(ctx context.Context, c candidate, f *flow, doc *Status, winner IdempotencyMarker) error {
	event := f.fail
	if _, ok := f.target(doc.Status, event); !ok {
		event = f.cancel
	}
	err := c.w.apply(ctx, bySystem(), func(ctx context.Context, d *Status) error {
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
func (g *dedupeGate) quarantineMarker(ctx context.Context, doc *Status, winner IdempotencyMarker) {
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
// lapsed lease, so the next submit of the winner's request creates it.
func (g *dedupeGate) repairRecord(ctx context.Context, doc *Status, winner IdempotencyMarker) {
	winnerExists := false
	if slug, statusKey, err := g.reads.locate(ctx, winner.RunID); err == nil {
		_, _, err = g.statuses.read(ctx, slug, winner.RunID, statusKey)
		winnerExists = err == nil
	}
	_, _, err := (&core.Record[IdempotencyRecord, *IdempotencyRecord]{Store: g.store, Key: layout.IdempotencyKey(doc.IdempotencyKey)}).Apply(ctx, func(cur *IdempotencyRecord) error {
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
			cur.Status, cur.ExpiresAt = IdempotencyCompleted, now.Add(g.completedTTL)
			cur.Response, _ = json.Marshal(map[string]string{"run_id": winner.RunID})
		} else {
			lapsed := now
			cur.Status, cur.Response, cur.LeaseExpiresAt = IdempotencyProcessing, nil, &lapsed
		}
		return nil
	})
	if err != nil && !errors.Is(err, errKeep) && !errors.Is(err, storage.ErrNotFound) {
		g.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_record_update_failed", slog.String("key", doc.IdempotencyKey), slog.String("error", err.Error()))
	}
}
