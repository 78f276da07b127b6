package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/proposals"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestProposalEvents: a proposal created and then applied through the
// proposal records reaches the stream as proposal.created and
// proposal.status.changed, with the run it belongs to.
func TestProposalEvents(t *testing.T) {
	t.Parallel()
	r := newRig(t, memstore.New(), events.Config{})
	s := r.open("", "")
	ps := proposals.New(r.store, r.clk.Now, "n1", nil)
	ctx := context.Background()
	r.clk.Advance(time.Millisecond)
	if _, err := ps.Create(ctx, lifecycle.ActorMastra, lifecycle.Proposal{ID: "prop_a", RunID: "run-1", AgentSlug: "a",
		ContentKey: "agents/a/runs/run-1/output/p.json"}); err != nil {
		t.Fatal(err)
	}
	r.clk.Advance(time.Millisecond)
	if _, err := ps.Decide(ctx, lifecycle.ActorGateway, "prop_a", lifecycle.ProposalApplied, ""); err != nil {
		t.Fatal(err)
	}
	r.poll()
	m := r.marker(r.store, "end")
	got := r.untilID(s, m.ID)
	eq(t, "events", wire(got)[:2], []string{
		`proposal.created {"type":"proposal.created","proposalId":"prop_a","runId":"run-1","status":"pending","from":""}`,
		`proposal.status.changed {"type":"proposal.status.changed","proposalId":"prop_a","runId":"run-1","status":"applied","from":"pending"}`,
	})
}
