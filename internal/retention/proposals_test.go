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
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
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
	// An entry an earlier attempt of p-pending's create left under
	// another time: not the record's, so it goes though the record stays.
	staleIdx, _ := layout.ProposalPendingKey(old.Add(-time.Minute), "p-pending")
	put(staleIdx, struct{}{})
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
		pending: true, pendingIdx: true, staleIdx: false, lostIdx: false, youngIdx: true,
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
	// A pending proposal is never eligible, however old.
	if retention.ProposalEligible(&lifecycle.Proposal{Status: lifecycle.ProposalPending}, t0, 0) {
		t.Error("a pending proposal is eligible")
	}
}

// TestPendingEntryOnASettlingStore: on a store that settles, an old
// pending-index entry read without its record is kept by the pass that
// first reads it so and deleted by a later one (not kept forever), while
// the entry of a pending proposal read missing once is kept: the next
// pass finds its record.
func TestPendingEntryOnASettlingStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	fs := faultstore.New(memstore.NewDriver())
	fs.SetSettle(7*time.Second, clk.Now)
	s := storage.New(fs)
	put := func(key string, v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if _, err := s.Put(ctx, key, b, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	created := t0.Add(-2 * time.Hour)
	lostIdx, _ := layout.ProposalPendingKey(created, "p-lost")
	put(lostIdx, struct{}{})
	rec, _ := layout.ProposalKey("p-pending")
	pendingIdx, _ := layout.ProposalPendingKey(created, "p-pending")
	put(rec, lifecycle.Proposal{SchemaVersion: 1, ID: "p-pending", RunID: "run-1", AgentSlug: "a", Status: lifecycle.ProposalPending, CreatedAt: created})
	put(pendingIdx, struct{}{})
	fs.Match(func(key string) bool { return key == rec })
	fs.FalseNotFound(1)

	j := newJanitor(t, retention.Config{Store: s, Owner: "p1", Clock: clk, Ages: map[retention.Kind]time.Duration{retention.Proposals: age}})
	kept := func(pass string, want map[string]bool) {
		t.Helper()
		if r, ran, err := j.Pass(ctx); err != nil || !ran {
			t.Fatalf("%s: Pass = %+v, %v, %v", pass, r, ran, err)
		}
		for key, want := range want {
			if _, _, err := s.Get(ctx, key); (err == nil) != want {
				t.Errorf("%s: %s kept = %v, want %v", pass, key, err == nil, want)
			}
		}
	}
	kept("first pass", map[string]bool{lostIdx: true, pendingIdx: true})
	if fs.Faults().FalseNotFounds != 1 {
		t.Fatalf("faults %+v, want one false not-found", fs.Faults())
	}
	clk.Advance(retention.DefaultInterval)
	kept("second pass", map[string]bool{lostIdx: false, pendingIdx: true, rec: true})
}
