package proposals_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/proposals"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

var t0 = time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC)

func fake(t time.Time) func() time.Time { return clock.NewFake(t).Now }

func draft(id string) lifecycle.Proposal {
	return lifecycle.Proposal{ID: id, RunID: "run_1", AgentSlug: "archivist", Step: "create-proposal",
		ContentKey: "agents/archivist/runs/run_1/output/" + id + ".json"}
}

// TestCreateByTheMemoryTable creates a proposal as every actor: the
// Memory Backend's table lets Mastra (via a proposal) and the gateway, and
// no one else, and a refusal writes nothing.
func TestCreateByTheMemoryTable(t *testing.T) {
	t.Parallel()
	for _, actor := range authority.Actors() {
		want := actor == lifecycle.ActorMastra || actor == lifecycle.ActorGateway
		t.Run(string(actor), func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			ps := proposals.New(s, fake(t0), "n1", nil)
			p, err := ps.Create(context.Background(), actor, draft("prop_a"))
			if (err == nil) != want {
				t.Fatalf("Create by %s: err %v, want allowed=%v", actor, err, want)
			}
			if !want {
				if !errors.Is(err, lifecycle.ErrForbiddenActor) {
					t.Fatalf("refusal %v is no FORBIDDEN", err)
				}
				for k, err := range s.List(context.Background(), "") {
					if err != nil {
						t.Fatal(err)
					}
					t.Fatalf("a refused create wrote %s", k)
				}
				return
			}
			if p.Status != lifecycle.ProposalPending || p.SchemaVersion != proposals.SchemaVersion || !p.CreatedAt.Equal(t0) {
				t.Fatalf("created %+v", p)
			}
		})
	}
}

// TestCreateIsCreateOnly: a step run again creates its proposal again and
// gets the record it made; another run's proposal under the same id is a
// conflict; a created proposal is in the audit log.
func TestCreateIsCreateOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	ps := proposals.New(s, clk.Now, "n1", nil)
	first, err := ps.Create(ctx, lifecycle.ActorMastra, draft("prop_a"))
	if err != nil {
		t.Fatal(err)
	}
	// Again at the same instant (its index entry is the record's own),
	// then later.
	for range 2 {
		again, err := ps.Create(ctx, lifecycle.ActorMastra, draft("prop_a"))
		if err != nil || !again.CreatedAt.Equal(first.CreatedAt) {
			t.Fatalf("again: %+v, %v", again, err)
		}
		clk.Advance(time.Minute)
	}
	other := draft("prop_a")
	other.RunID = "run_2"
	var ce *proposals.ConflictError
	if _, err := ps.Create(ctx, lifecycle.ActorMastra, other); !errors.As(err, &ce) || ce.Code() != "CONFLICT" {
		t.Fatalf("another run's: %v", err)
	}
	page, _, err := ps.Pending(ctx, 0, "")
	if err != nil || len(page) != 1 {
		t.Fatalf("pending after a replay: %d, %v", len(page), err)
	}
	n := 0
	for k, err := range s.List(ctx, layout.ProposalsPendingIndex) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		_ = k
	}
	if n != 1 {
		t.Fatalf("%d index entries after a replay, want 1", n)
	}
	var events []lifecycle.AuditEvent
	for ev, err := range records.ReadAuditDay(ctx, s, t0) {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	if len(events) != 1 || events[0].Event != proposals.EventCreate || events[0].ProposalID != "prop_a" || events[0].RunID != "run_1" {
		t.Fatalf("audit: %+v", events)
	}
}

// TestPendingNewestFirstPaged lists five proposals two a page, newest
// first, and loses a decided one from the list.
func TestPendingNewestFirstPaged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	ps := proposals.New(s, clk.Now, "", nil)
	for i := range 5 {
		if _, err := ps.Create(ctx, lifecycle.ActorMastra, draft(fmt.Sprintf("prop_%d", i))); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	if _, err := ps.Decide(ctx, lifecycle.ActorGateway, "prop_3", lifecycle.ProposalApplied, ""); err != nil {
		t.Fatal(err)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		page, next, err := ps.Pending(ctx, 2, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page {
			got = append(got, p.ID)
		}
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
		cursor = next
	}
	if want := []string{"prop_4", "prop_2", "prop_1", "prop_0"}; !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	if _, _, err := ps.Pending(ctx, 501, ""); err == nil {
		t.Fatal("a limit over 500 was served")
	}
	if _, _, err := ps.Pending(ctx, 2, "bm90IGEgY3Vyc29y"); err == nil {
		t.Fatal("a cursor of no page was served")
	}
}

// TestDecide: only the gateway decides (the Memory Backend's write), once,
// to applied or rejected, with its reason kept.
func TestDecide(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name   string
		actor  lifecycle.Actor
		to     lifecycle.ProposalState
		reason string
		check  func(error) bool
	}{
		{"gateway applies", lifecycle.ActorGateway, lifecycle.ProposalApplied, "", func(err error) bool { return err == nil }},
		{"gateway rejects", lifecycle.ActorGateway, lifecycle.ProposalRejected, "duplicate of another", func(err error) bool { return err == nil }},
		{"mastra may not", lifecycle.ActorMastra, lifecycle.ProposalApplied, "", func(err error) bool { return errors.Is(err, lifecycle.ErrForbiddenActor) }},
		{"orchestration may not", lifecycle.ActorOrchestration, lifecycle.ProposalApplied, "", func(err error) bool { return errors.Is(err, lifecycle.ErrForbiddenActor) }},
		{"admin may not", lifecycle.ActorAdmin, lifecycle.ProposalRejected, "", func(err error) bool { return errors.Is(err, lifecycle.ErrForbiddenActor) }},
		{"not a decision", lifecycle.ActorGateway, lifecycle.ProposalPending, "", func(err error) bool {
			var ie *proposals.InvalidError
			return errors.As(err, &ie)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			ps := proposals.New(s, fake(t0), "", nil)
			if _, err := ps.Create(ctx, lifecycle.ActorMastra, draft("prop_a")); err != nil {
				t.Fatal(err)
			}
			p, err := ps.Decide(ctx, tc.actor, "prop_a", tc.to, tc.reason)
			if !tc.check(err) {
				t.Fatalf("Decide: %v", err)
			}
			if err != nil {
				if got, _ := ps.Get(ctx, "prop_a"); got.Status != lifecycle.ProposalPending {
					t.Fatalf("a refused decision moved it to %s", got.Status)
				}
				return
			}
			if p.Status != tc.to || p.DecidedBy != tc.actor || p.Reason != tc.reason || p.DecidedAt == nil {
				t.Fatalf("decided %+v", p)
			}
			var ce *proposals.ConflictError
			if _, err := ps.Decide(ctx, tc.actor, "prop_a", lifecycle.ProposalApplied, ""); !errors.As(err, &ce) {
				t.Fatalf("decided twice: %v", err)
			}
		})
	}
	ps := proposals.New(memstore.New(), nil, "", nil)
	if _, err := ps.Decide(ctx, lifecycle.ActorGateway, "prop_none", lifecycle.ProposalApplied, ""); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a missing proposal: %v", err)
	}
}

// TestSettlingStoreKeepsADecision: on a store that settles, whose
// create-only write may take over an existing record, a step run again
// after its proposal was applied leaves it applied.
func TestSettlingStoreKeepsADecision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := faultstore.New(memstore.New())
	fs.SetSettle(10*time.Second, nil)
	ps := proposals.New(storage.New(fs), fake(t0), "", nil)
	if _, err := ps.Create(ctx, lifecycle.ActorMastra, draft("prop_a")); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Decide(ctx, lifecycle.ActorGateway, "prop_a", lifecycle.ProposalApplied, ""); err != nil {
		t.Fatal(err)
	}
	fs.AcceptCreateOver(1)
	if p, err := ps.Create(ctx, lifecycle.ActorMastra, draft("prop_a")); err != nil || p.Status != lifecycle.ProposalApplied {
		t.Fatalf("again: %+v, %v", p, err)
	}
	if p, err := ps.Get(ctx, "prop_a"); err != nil || p.Status != lifecycle.ProposalApplied {
		t.Fatalf("the record is %+v, %v; want it applied still", p, err)
	}
}

// TestPendingOnSQLite lists the pending proposals on the Worker's default
// store, whose key order the index relies on.
func TestPendingOnSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	ps := proposals.New(teststores.SQLite(t), clk.Now, "", nil)
	for _, id := range []string{"prop_x", "prop_y", "prop_z"} {
		if _, err := ps.Create(ctx, lifecycle.ActorGateway, draft(id)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour * 24 * 40) // entries in other folders
	}
	page, _, err := ps.Pending(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range page {
		got = append(got, p.ID)
	}
	if want := []string{"prop_z", "prop_y", "prop_x"}; !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
}
