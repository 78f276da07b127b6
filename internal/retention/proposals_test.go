package retention_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// TestProposalsRetained: a decided proposal past the age goes with any
// index entry left of it; a pending one, and a decided one within the age,
// stay; an old pending-index entry whose proposal was decided or never
// written goes, a young one stays (its create may be in flight).
func TestProposalsRetained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	put := func(key string, v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if _, err := s.Put(ctx, key, b, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	old, recent := t0.Add(-age-time.Hour), t0.Add(-age+time.Hour)
	proposal := func(id string, status lifecycle.ProposalState, created time.Time, decided *time.Time, entry bool) (rec, idx string) {
		rec, _ = layout.ProposalKey(id)
		idx, _ = layout.ProposalPendingKey(created, id)
		put(rec, lifecycle.Proposal{SchemaVersion: 1, ID: id, RunID: "run-1", AgentSlug: "a", Status: status, CreatedAt: created, DecidedAt: decided})
		if entry {
			put(idx, struct{}{})
		}
		return rec, idx
	}
	oldApplied, oldAppliedIdx := proposal("p-old-applied", lifecycle.ProposalApplied, old, &old, true) // entry left by a crash
	oldRejected, _ := proposal("p-old-rejected", lifecycle.ProposalRejected, old, &old, false)
	newApplied, _ := proposal("p-new-applied", lifecycle.ProposalApplied, old, &recent, false)
	pending, pendingIdx := proposal("p-pending", lifecycle.ProposalPending, old, nil, true)
	// Entries without a record: an old one (its writer died) and a young one.
	lostIdx, _ := layout.ProposalPendingKey(t0.Add(-2*time.Hour), "p-lost")
	youngIdx, _ := layout.ProposalPendingKey(t0.Add(-time.Minute), "p-young")
	put(lostIdx, struct{}{})
	put(youngIdx, struct{}{})

	j := newJanitor(t, retention.Config{Store: s, Owner: "p1", Clock: clk, Age: age, Page: 3})
	r, ran, err := j.Pass(ctx)
	if err != nil || !ran {
		t.Fatalf("Pass = %+v, %v, %v", r, ran, err)
	}
	for key, want := range map[string]bool{
		oldApplied: false, oldAppliedIdx: false, oldRejected: false, newApplied: true,
		pending: true, pendingIdx: true, lostIdx: false, youngIdx: true,
	} {
		_, _, err := s.Get(ctx, key)
		if got := err == nil; got != want {
			t.Errorf("%s kept = %v, want %v (%v)", key, got, want, err)
		}
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			t.Fatal(err)
		}
	}
	if r.Deleted[retention.Proposals] != 2 {
		t.Errorf("deleted %d proposals, want 2 (%+v)", r.Deleted[retention.Proposals], r)
	}
	// With retention off for the kind, nothing of it goes.
	if retention.ProposalEligible(&lifecycle.Proposal{Status: lifecycle.ProposalPending}, t0, 0) {
		t.Error("a pending proposal is eligible")
	}
}
