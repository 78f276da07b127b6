package retention

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
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
		// settles: only a store that does not settle proves it absent
		// (readers skip an entry without its record meanwhile).
		if j.cfg.Store.SettleTime() > 0 {
			r.Skipped++
			return nil
		}
	case err != nil:
		return err
	default:
		var p lifecycle.Proposal
		if json.Unmarshal(b, &p) != nil || p.Status == lifecycle.ProposalPending {
			// Pending, or junk its reader quarantines: kept.
			return nil
		}
	}
	// Decided, or never written: the entry names nothing a reader of the
	// pending list should see.
	if err := j.cfg.Store.Delete(ctx, key, storage.Condition{}); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	r.Keys++
	return nil
}
