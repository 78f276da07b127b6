package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// handlerFunc is a route's handler: an error it returns is answered in the
// JSON error form.
type handlerFunc = func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error

// jsonRoute is the skeleton most routes share: parse the request (path id,
// query, body), make the call, answer its result as JSON with status.
func jsonRoute[In, Out any](status int, parse func(*http.Request, lifecycle.Actor) (In, error),
	call func(context.Context, lifecycle.Actor, In) (Out, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
		in, err := parse(r, actor)
		if err != nil {
			return err
		}
		out, err := call(r.Context(), actor, in)
		if err != nil {
			return err
		}
		return writeJSON(w, status, out)
	}
}

// needs answers absent(what) before anything else when an optional part of
// the Config is not served; the Config is fixed once New has returned.
func needs(present bool, what string, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
		if !present {
			return absent(what)
		}
		return h(w, r, actor)
	}
}

// noInput is the parse of a route that reads nothing of the request.
func noInput(*http.Request, lifecycle.Actor) (struct{}, error) { return struct{}{}, nil }

// pathParam parses the path id name (checked as field).
func pathParam(name, field string) func(*http.Request, lifecycle.Actor) (string, error) {
	return func(r *http.Request, _ lifecycle.Actor) (string, error) {
		return pathID(r, name, field)
	}
}

// pathNoBody parses the path id name of a route that takes no body; a body
// is refused with msg.
func pathNoBody(name, field, msg string) func(*http.Request, lifecycle.Actor) (string, error) {
	return func(r *http.Request, _ lifecycle.Actor) (string, error) {
		id, err := pathID(r, name, field)
		if err != nil {
			return "", err
		}
		if r.ContentLength != 0 { // -1: a chunked body, refused too
			return "", apiErr(codes.InvalidRequest, "%s", msg)
		}
		return id, nil
	}
}

// idBody is a path id and the decoded body of a request.
type idBody[B any] struct {
	id   string
	body B
}

// pathBody parses the path id name, then reads and decodes the body.
func pathBody[B any](name, field string, decode func([]byte) (B, error)) func(*http.Request, lifecycle.Actor) (idBody[B], error) {
	return func(r *http.Request, actor lifecycle.Actor) (idBody[B], error) {
		id, err := pathID(r, name, field)
		if err != nil {
			return idBody[B]{}, err
		}
		b, err := jsonBody(decode)(r, actor)
		return idBody[B]{id: id, body: b}, err
	}
}

// jsonBody reads and decodes the body.
func jsonBody[B any](decode func([]byte) (B, error)) func(*http.Request, lifecycle.Actor) (B, error) {
	return func(r *http.Request, _ lifecycle.Actor) (B, error) {
		var b B
		data, err := readBody(r)
		if err != nil {
			return b, err
		}
		return decode(data)
	}
}

// optionalBody decodes a body whose every field is optional (an empty body
// is allowed).
func optionalBody[B any](data []byte) (B, error) {
	var b B
	err := decodeStrict(data, &b, true)
	return b, err
}

// requiredBody decodes a body that must be given, strictly, for a callee
// that checks its fields itself.
func requiredBody[B any](data []byte) (B, error) {
	var b B
	err := decodeStrict(data, &b, false)
	return b, err
}

// pageParams are a list's paging parameters: ?limit= (0 when absent: the
// SDK's default) and ?cursor=.
type pageParams struct {
	limit  int
	cursor string
}

// readPageParams reads ?limit= and ?cursor=; the SDK checks their range
// and the position a cursor holds once pagedRoute has checked its MAC.
func readPageParams(r *http.Request) (pageParams, error) {
	q := r.URL.Query()
	p := pageParams{cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > codes.MaxPageLimit {
			return p, apiErr(codes.InvalidRequest, "limit %q is not a number within 1..%d", v, codes.MaxPageLimit)
		}
		p.limit = n
	}
	return p, nil
}

// pagedRoute is jsonRoute for a list: the body is the page's items (a
// plain JSON array, never null), and the next page, if any, is in a Link
// header (RFC 8288): this request's URL with its cursor replaced. The
// cursors on the wire are signed by cs for their list: call sees the SDK's
// position, and a cursor no page of this list handed out is refused.
func pagedRoute[In, Item any](cs *cursors, parse func(*http.Request, lifecycle.Actor) (In, error),
	call func(context.Context, lifecycle.Actor, In, pageParams) ([]Item, string, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
		in, err := parse(r, actor)
		if err != nil {
			return err
		}
		p, err := readPageParams(r)
		if err != nil {
			return err
		}
		list := listOf(r.URL)
		if p.cursor, err = cs.open(r.Context(), list, p.cursor); err != nil {
			return err
		}
		items, next, err := call(r.Context(), actor, in, p)
		if err != nil {
			return err
		}
		if items == nil {
			items = []Item{}
		}
		if next != "" {
			if next, err = cs.seal(r.Context(), list, next); err != nil {
				return err
			}
			w.Header().Set("Link", nextLink(r.URL, next))
		}
		return writeJSON(w, http.StatusOK, items)
	}
}

// nextLink is the Link header value of the page after u's, at cursor.
func nextLink(u *url.URL, cursor string) string {
	q := u.Query()
	q.Set("cursor", cursor)
	next := url.URL{Path: u.Path, RawQuery: q.Encode()}
	return "<" + next.String() + `>; rel="next"`
}
