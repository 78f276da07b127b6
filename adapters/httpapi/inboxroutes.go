package httpapi

import (
	"context"
	"net/http"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// inboxRoutes serves /inbox/* over the inbox, nil when none is served.
type inboxRoutes struct {
	box     *inbox.Box
	cursors *cursors
}

func (h *inboxRoutes) table() []route {
	return []route{
		{method: "POST", path: "/inbox/submit", actors: submitters, guest: true, body: true, h: h.submitInbox()},
		{method: "GET", path: "/inbox/stats", h: h.inboxStats()},
		{method: "GET", path: "/inbox/entries", h: h.inboxEntries()},
	}
}

func (h *inboxRoutes) submitInbox() handlerFunc {
	return needs(h.box != nil, "inbox", jsonRoute(http.StatusCreated, jsonBody(requiredBody[lifecycle.InboxSubmission]),
		func(ctx context.Context, actor lifecycle.Actor, sub lifecycle.InboxSubmission) (wire.InboxAnswer, error) {
			// A zone guest's entry carries its zone as its identity,
			// whatever the body says: a guest speaks for no one else.
			if _, guest := authority.GuestZone(actor); guest {
				sub.Source.Identity = string(actor)
			}
			// The route admits the owner's callers and zone guests; the Worker, the gateway, is who
			// writes a pending entry (docs/spec.md#inbox-entry-lifecycle).
			e, err := h.box.Submit(ctx, lifecycle.ActorGateway, sub)
			if err != nil {
				return wire.InboxAnswer{}, err
			}
			return wire.InboxAnswer{InboxID: e.ID, Status: e.Status}, nil
		}))
}

func (h *inboxRoutes) inboxStats() handlerFunc {
	return needs(h.box != nil, "inbox", jsonRoute(http.StatusOK, noInput,
		func(ctx context.Context, _ lifecycle.Actor, _ struct{}) (lifecycle.InboxStats, error) {
			return h.box.Stats(ctx)
		}))
}

// statusQuery reads GET /inbox/entries's optional ?status= filter and
// ?include_expired=true, which lists the expired entries among the others
// (the page's "show expired").
func statusQuery(r *http.Request, _ lifecycle.Actor) (inbox.ListOptions, error) {
	var opts inbox.ListOptions
	switch v := r.URL.Query().Get("include_expired"); v {
	case "", "false":
	case "true":
		opts.IncludeExpired = true
	default:
		return opts, apiErr(codes.InvalidRequest, "include_expired %q is not true or false", v)
	}
	if v := r.URL.Query().Get("status"); v != "" {
		known := false
		for _, st := range machine.InboxStates() {
			known = known || string(st) == v
		}
		if !known {
			return opts, apiErr(codes.InvalidRequest, "unknown status %q (want pending, processed, rejected or expired)", v)
		}
		opts.Status = lifecycle.InboxState(v)
	}
	return opts, nil
}

func (h *inboxRoutes) inboxEntries() handlerFunc {
	return needs(h.box != nil, "inbox", pagedRoute(h.cursors, statusQuery,
		func(ctx context.Context, _ lifecycle.Actor, opts inbox.ListOptions, p pageParams) ([]lifecycle.InboxEntry, string, error) {
			page, err := h.box.ListPage(ctx, opts, p.limit, p.cursor)
			return page.Entries, page.Next, err
		}))
}
