package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/runconveyor/conveyor/lifecycle"
)

// Page selects a page of a list: at most Limit items (0: the server's
// default, 50; at most 500) after Cursor ("" for the first page; else the
// next cursor a page before handed out, opaque).
type Page struct {
	Limit  int
	Cursor string
}

func (p Page) values(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	return q
}

// RunsQuery selects runs for RunsPage and AllRuns (GET /runs): an agent
// ("" every agent), a status ("" every status), and the page.
type RunsQuery struct {
	Agent  string
	Status string
	Page
}

func (q RunsQuery) values() url.Values {
	v := url.Values{}
	if q.Agent != "" {
		v.Set("agent", q.Agent)
	}
	if q.Status != "" {
		v.Set("status", q.Status)
	}
	return q.Page.values(v)
}

// RunsPage reads one page of runs, newest first, and the cursor of the next
// page ("" on the last).
func (c *Client) RunsPage(ctx context.Context, q RunsQuery) ([]lifecycle.RunStatus, string, error) {
	var out []lifecycle.RunStatus
	next, err := c.page(ctx, "/runs", q.values(), &out)
	return out, next, err
}

// AllRuns yields the runs q selects, newest first, page after page from
// q.Cursor, following each page's Link rel="next"; an error ends it.
func (c *Client) AllRuns(ctx context.Context, q RunsQuery) iter.Seq2[lifecycle.RunStatus, error] {
	return pages(func(cursor string) ([]lifecycle.RunStatus, string, error) {
		q.Cursor = cursor
		return c.RunsPage(ctx, q)
	}, q.Cursor)
}

// JobsQuery selects jobs for JobsPage and AllJobs (GET /jobs): filters
// ("" any) and the page.
type JobsQuery struct {
	Status lifecycle.JobState
	Type   lifecycle.JobType
	Agent  string
	Page
}

// JobsPage reads one page of jobs (in job id order) and the cursor of the
// next page ("" on the last). A page of a rare filter may be short, even
// empty, and still have a next cursor: the server bounds the records a
// page reads.
func (c *Client) JobsPage(ctx context.Context, q JobsQuery) ([]lifecycle.Job, string, error) {
	v := url.Values{}
	if q.Status != "" {
		v.Set("status", string(q.Status))
	}
	if q.Type != "" {
		v.Set("type", string(q.Type))
	}
	if q.Agent != "" {
		v.Set("agent", q.Agent)
	}
	var out []lifecycle.Job
	next, err := c.page(ctx, "/jobs", q.Page.values(v), &out)
	return out, next, err
}

// AllJobs yields the jobs q selects, page after page from q.Cursor; an
// error ends it.
func (c *Client) AllJobs(ctx context.Context, q JobsQuery) iter.Seq2[lifecycle.Job, error] {
	return pages(func(cursor string) ([]lifecycle.Job, string, error) {
		q.Cursor = cursor
		return c.JobsPage(ctx, q)
	}, q.Cursor)
}

// collect gathers every item of seq, never nil.
func collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	out := []T{}
	for it, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

// page GETs one page of a list into out and returns its next cursor.
func (c *Client) page(ctx context.Context, path string, query url.Values, out any) (string, error) {
	req, err := c.newRequest(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return "", err
	}
	_, h, err := c.send(req, out)
	if err != nil {
		return "", err
	}
	return NextCursor(h), nil
}

// pages yields every item of the pages read from cursor on.
func pages[T any](read func(cursor string) ([]T, string, error), cursor string) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			items, next, err := read(cursor)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" || next == cursor {
				return
			}
			cursor = next
		}
	}
}

// NextCursor returns the cursor of the Link rel="next" in h (RFC 8288),
// "" when there is none.
func NextCursor(h http.Header) string {
	for _, v := range h.Values("Link") {
		for link := range strings.SplitSeq(v, ",") {
			target, params, ok := strings.Cut(link, ";")
			target = strings.TrimSpace(target)
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			if !isNext(params) {
				continue
			}
			u, err := url.Parse(target[1 : len(target)-1])
			if err != nil {
				continue
			}
			return u.Query().Get("cursor")
		}
	}
	return ""
}

// isNext tells whether a link's parameters hold rel="next" (rel may list
// several relation types).
func isNext(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "rel") {
			continue
		}
		for rel := range strings.FieldsSeq(strings.Trim(strings.TrimSpace(v), `"`)) {
			if strings.EqualFold(rel, "next") {
				return true
			}
		}
	}
	return false
}
