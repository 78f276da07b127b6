package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Proposals calls the routes of the proposals runs create: the pending
// list, one proposal, and the gateway's decision. It is a value over a
// Client: Proposals{Client: c}.
type Proposals struct {
	Client *Client
}

// Pending reads a page of the pending proposals, newest first (GET
// /proposals/pending), and the cursor of the next page ("" on the last);
// with q.All, every page. Only q's Limit, Cursor and All apply.
func (p Proposals) Pending(ctx context.Context, q Query) ([]lifecycle.Proposal, string, error) {
	return list[lifecycle.Proposal](ctx, connOf(p.Client), "/proposals/pending", q)
}

// Get reads one proposal (GET /proposals/{id}).
func (p Proposals) Get(ctx context.Context, id string) (lifecycle.Proposal, error) {
	return get[lifecycle.Proposal](ctx, connOf(p.Client), http.MethodGet, "/proposals/"+url.PathEscape(id), nil)
}

// Decide marks a pending proposal applied (apply true) or rejected, with
// an optional reason (POST /proposals/{id}/decision; the gateway only). A
// proposal decided already answers CONFLICT.
func (p Proposals) Decide(ctx context.Context, id string, apply bool, reason string) (lifecycle.Proposal, error) {
	status := lifecycle.ProposalRejected
	if apply {
		status = lifecycle.ProposalApplied
	}
	return get[lifecycle.Proposal](ctx, connOf(p.Client), http.MethodPost, "/proposals/"+url.PathEscape(id)+"/decision",
		wire.ProposalDecisionBody{Status: string(status), Reason: reason})
}
