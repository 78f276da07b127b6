package retention

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// proposalEntryMargin is how old an entry of the pending index must be
// before the pass judges it by its record: the entry is written before
// the record, so a younger one may belong to a create in flight.
const proposalEntryMargin = time.Hour

// ProposalEligible tells whether a proposal is past age: applied or
// rejected, decided at least age before now. Pending ones never are.
func ProposalEligible(p *lifecycle.Proposal, now time.Time, age time.Duration) bool {
	if p.Status == lifecycle.ProposalPending || p.DecidedAt == nil {
		return false
	}
	return !now.Before(p.DecidedAt.Add(age))
}

// visitProposal judges a proposal record, or an entry of the pending
// index: a decided proposal past its age goes (its index entry first, in
// case one was left), and an old entry whose proposal is decided or was
// never written goes too.
func (j *Janitor) visitProposal(ctx context.Context, key string, now time.Time, age time.Duration, r *Report) error {
	if entry, ok := strings.CutPrefix(key, layout.ProposalsPendingIndex); ok {
		return j.visitPendingEntry(ctx, key, entry, now, r)
	}
	if _, ok := layout.ParseProposalKey(key); !ok {
		return nil
	}
	var p lifecycle.Proposal
	ver, ok, err := j.read(ctx, key, &p, r)
	if !ok || err != nil || !ProposalEligible(&p, now, age) {
		return err
	}
	if entry, err := layout.ProposalPendingKey(p.CreatedAt, p.ID); err == nil {
		if err := j.cfg.Store.Delete(ctx, entry, storage.Condition{}); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
	}
	return j.deleteFenced(ctx, Proposals, key, ver, r)
}

// visitPendingEntry removes an entry of the pending index that no pending
// proposal stands behind, once it is older than proposalEntryMargin.
func (j *Janitor) visitPendingEntry(ctx context.Context, key, entry string, now time.Time, r *Report) error {
	created, id, ok := layout.ParseNewestFirst(entry)
	if !ok || now.Sub(created) < proposalEntryMargin {
		return nil
	}
	recKey, err := layout.ProposalKey(id)
	if err != nil {
		return nil
	}
	b, _, err := j.cfg.Store.Get(ctx, recKey)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		// Never written, or read missing for a moment by a store that
		// settles: there, only a later pass, at least SettleTime on, that
		// reads it missing again proves it absent (readers skip an entry
		// without its record meanwhile).
		if !j.suspects.confirmed(key, now, j.cfg.Store.SettleTime(), j.cfg.Interval) {
			r.Skipped++
			return nil
		}
	case err != nil:
		return err
	default:
		j.suspects.forget(key)
		var p lifecycle.Proposal
		if json.Unmarshal(b, &p) != nil {
			return nil // junk its reader quarantines: kept
		}
		if own, _ := layout.ProposalPendingKey(p.CreatedAt, p.ID); p.Status == lifecycle.ProposalPending && own == key {
			return nil // the entry of a pending proposal
		}
		// Decided, or an entry an earlier attempt of the create left
		// under another time (readers skip it: it is not the record's).
	}
	// Decided, or never written: the entry names nothing a reader of the
	// pending list should see.
	if err := j.cfg.Store.Delete(ctx, key, storage.Condition{}); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	j.suspects.forget(key)
	r.Keys++
	return nil
}

// absences are the pending-index entries a pass read without their record
// on a store that settles, each with when it was first read so. Unlike
// evidence.Absence, whose evidence lapses after 2×Settle (a key may be
// written since), a suspicion here lasts across passes an Interval apart:
// an entry past proposalEntryMargin has no create in flight that could
// still write its record. Held in memory: a pass resumed by another
// process starts its suspicions anew, which only delays the delete.
type absences struct {
	mu    sync.Mutex
	first map[string]time.Time
}

// confirmed records key read missing at now and reports whether an
// earlier pass read it missing at least settle before (at once when
// settle is 0). Suspicions not confirmed within 3 intervals (their entry
// went another way) are dropped.
func (a *absences) confirmed(key string, now time.Time, settle, interval time.Duration) bool {
	if settle <= 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.first == nil {
		a.first = map[string]time.Time{}
	}
	for k, t := range a.first {
		if now.Sub(t) > 3*interval+settle {
			delete(a.first, k)
		}
	}
	t, ok := a.first[key]
	if !ok {
		a.first[key] = now
		return false
	}
	return now.Sub(t) >= settle
}

// forget drops a suspicion: the record was read, or the entry deleted.
func (a *absences) forget(key string) {
	a.mu.Lock()
	delete(a.first, key)
	a.mu.Unlock()
}
