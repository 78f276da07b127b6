package httpapi

import (
	"context"
	"net/http"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/proposals"
	"github.com/runconveyor/conveyor/lifecycle"
)

// proposalRoutes serves /proposals over the store's proposal records
// (docs/spec.md#proposal), nil when no store is given.
type proposalRoutes struct {
	props   *proposals.Store
	cursors *cursors
}

// deciders are the actors the Memory Backend's table lets write the
// memory themselves: who applies or rejects a proposal (the gateway).
func deciders() []lifecycle.Actor { return tableActors(authority.Memory, authority.Write) }

func (h *proposalRoutes) table() []route {
	return []route{
		{method: "GET", path: "/proposals/pending", h: h.pending()},
		{method: "GET", path: "/proposals/{proposalId}", h: h.get()},
		{method: "POST", path: "/proposals/{proposalId}/decision", actors: deciders(), body: true, h: h.decide()},
	}
}

func (h *proposalRoutes) pending() handlerFunc {
	return needs(h.props != nil, "store for proposals", pagedRoute(h.cursors, noInput,
		func(ctx context.Context, _ lifecycle.Actor, _ struct{}, p pageParams) ([]lifecycle.Proposal, string, error) {
			return h.props.Pending(ctx, p.limit, p.cursor)
		}))
}

func (h *proposalRoutes) get() handlerFunc {
	return needs(h.props != nil, "store for proposals", jsonRoute(http.StatusOK, pathParam("proposalId", "proposal id"),
		func(ctx context.Context, _ lifecycle.Actor, id string) (lifecycle.Proposal, error) {
			return h.props.Get(ctx, id)
		}))
}

func decodeDecision(data []byte) (wire.ProposalDecisionBody, error) {
	var b wire.ProposalDecisionBody
	if err := decodeStrict(data, &b, false); err != nil {
		return b, err
	}
	if b.Status != string(lifecycle.ProposalApplied) && b.Status != string(lifecycle.ProposalRejected) {
		return b, apiErr(codes.InvalidRequest, "status must be applied or rejected, not %q", b.Status)
	}
	return b, nil
}

func (h *proposalRoutes) decide() handlerFunc {
	return needs(h.props != nil, "store for proposals", jsonRoute(http.StatusOK, pathBody("proposalId", "proposal id", decodeDecision),
		func(ctx context.Context, actor lifecycle.Actor, in idBody[wire.ProposalDecisionBody]) (lifecycle.Proposal, error) {
			return h.props.Decide(ctx, actor, in.id, lifecycle.ProposalState(in.body.Status), in.body.Reason)
		}))
}
