package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Query selects the items of a list (Runs, Jobs, InboxEntries, Quarantine)
// and the page of them to read.
type Query struct {
	// Agent keeps the runs or jobs of one agent ("" every agent).
	Agent string
	// Status keeps the items in one state ("" every state): a run's
	// status, a job's or an inbox entry's state.
	Status string
	// Type keeps the jobs of one type ("" every type).
	Type string
	// Repo keeps the runs of one repository, "owner/name" ("" every one).
	Repo string
	// Tenant lists the runs of one tenant, for a token of every tenant
	// (actor@*; "" the default tenant's); a token of one tenant lists its
	// own whatever this says.
	Tenant string
	// Limit is the size of a page: at most Limit items (0: the server's
	// default, 50; at most 500; with All, 500).
	Limit int
	// Cursor starts the list after the page that handed it out ("" the
	// first page); it is opaque.
	Cursor string
	// All reads every page from Cursor on: the answer holds every item,
	// and its next cursor is "".
	All bool
}

func (q Query) values(fields ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] != "" {
			v.Set(fields[i], fields[i+1])
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	return v
}

// Runs reads a page of the runs q selects (GET /runs), newest first, and
// the cursor of the next page ("" on the last); with q.All, every page.
func (c *Client) Runs(ctx context.Context, q Query) ([]lifecycle.RunStatus, string, error) {
	return list[lifecycle.RunStatus](ctx, connOf(c), "/runs", q, "agent", q.Agent, "status", q.Status, "repo", q.Repo, "tenant", q.Tenant)
}

// Jobs reads a page of the jobs q selects (GET /jobs), in job id order,
// and the cursor of the next page ("" on the last); with q.All, every
// page. A page of a rare filter may be short, even empty, and still have a
// next cursor: the server bounds the records a page reads.
func (c *Client) Jobs(ctx context.Context, q Query) ([]lifecycle.Job, string, error) {
	return list[lifecycle.Job](ctx, connOf(c), "/jobs", q, "status", q.Status, "type", q.Type, "agent", q.Agent)
}

// InboxEntries reads a page of the inbox's entries (GET /inbox/entries),
// of one state when q.Status is set, and the cursor of the next page (""
// on the last); with q.All, every page.
func (c *Client) InboxEntries(ctx context.Context, q Query) ([]lifecycle.InboxEntry, string, error) {
	return list[lifecycle.InboxEntry](ctx, connOf(c), "/inbox/entries", q, "status", q.Status)
}

// Quarantine reads a page of the quarantined records in key order (GET
// /quarantine, admin) and the cursor of the next page ("" on the last);
// with q.All, every page.
func (c *Client) Quarantine(ctx context.Context, q Query) ([]lifecycle.Quarantined, string, error) {
	return list[lifecycle.Quarantined](ctx, connOf(c), "/quarantine", q)
}

// list reads the page of path that q selects (filters: name, value
// pairs), or with q.All every page from q.Cursor on, never nil then.
func list[T any](ctx context.Context, k conn, path string, q Query, filters ...string) ([]T, string, error) {
	if !q.All {
		return page[T](ctx, k, path, q.values(filters...))
	}
	if q.Limit == 0 {
		q.Limit = 500
	}
	out := []T{}
	for {
		items, next, err := page[T](ctx, k, path, q.values(filters...))
		if err != nil {
			return nil, "", err
		}
		out = append(out, items...)
		if next == "" || next == q.Cursor {
			return out, "", nil
		}
		q.Cursor = next
	}
}

// page GETs one page of a list and returns its next cursor.
func page[T any](ctx context.Context, k conn, path string, query url.Values) ([]T, string, error) {
	req, err := k.newRequest(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return nil, "", err
	}
	var out []T
	h, err := k.send(req, &out)
	if err != nil {
		return nil, "", err
	}
	return out, wire.NextCursor(h), nil
}
