package paging

import (
	"context"
	"iter"
	"strconv"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/storage"
)

// Error refuses a page request: a limit out of range, a cursor no
// page handed out, or a filter no record can match. Its code is
// INVALID_REQUEST, or INVALID_CURSOR for the cursor.
type Error struct {
	Field  string // "limit", "cursor", or the filter's name
	Reason string
}

// Error names the field and why it was refused.
func (e *Error) Error() string { return "invalid " + e.Field + ": " + e.Reason }

// Code is INVALID_CURSOR for a cursor, INVALID_REQUEST otherwise.
func (e *Error) Code() string {
	if e.Field == "cursor" {
		return codes.InvalidCursor
	}
	return codes.InvalidRequest
}

// Limit is the number of items a page of limit holds: 0 means
// codes.DefaultPageLimit; a negative limit or one over codes.MaxPageLimit
// is a *Error.
func Limit(limit int) (int, error) {
	switch {
	case limit == 0:
		return codes.DefaultPageLimit, nil
	case limit < 0 || limit > codes.MaxPageLimit:
		return 0, &Error{Field: "limit", Reason: strconv.Itoa(limit) + " is not within 1.." + strconv.Itoa(codes.MaxPageLimit)}
	}
	return limit, nil
}

// Cursor decodes a page's cursor into the index entry it resumes
// after ("" for the first page), checking it with valid (nil: any entry).
func Cursor(cursor string, valid func(entry string) bool) (string, error) {
	if cursor == "" {
		return "", nil
	}
	entry, ok := layout.DecodeCursor(cursor)
	if !ok || (valid != nil && !valid(entry)) {
		return "", &Error{Field: "cursor", Reason: "not a cursor of this list"}
	}
	return entry, nil
}

// Read reads one page of an index: up to limit items, in ascending
// order of their entries (a key less its list's prefix), from the lists
// under prefixes merged, after the entry after ("" from the start). read
// turns an entry of prefixes[i] into an item, or reports ok false for an
// entry to skip (its record gone, or no longer matching the entry: the
// index is kept beside the records, never atomically with them, so every
// entry is checked against its record). Two lists must not hold one entry.
//
// next is the cursor of the following page, "" when no entry follows the
// last item. The cost is what the page yields plus the entries it skips,
// never the length of the lists. budget, when above 0, bounds the entries
// read: a list filtered by reading its records (no index of the filter)
// then answers a short page, even an empty one, with a next cursor, so a
// request costs at most budget reads however rare the match.
func Read[T any](ctx context.Context, s *storage.Store, prefixes []string, after string, limit, budget int,
	read func(ctx context.Context, list int, entry string) (T, bool, error)) (items []T, next string, err error) {
	type head struct {
		next  func() (string, error, bool)
		stop  func()
		entry string
		ok    bool
	}
	heads := make([]*head, len(prefixes))
	defer func() {
		for _, h := range heads {
			if h != nil {
				h.stop()
			}
		}
	}()
	advance := func(i int) error {
		h := heads[i]
		key, err, ok := h.next()
		if err != nil {
			return err
		}
		h.ok = ok
		if ok {
			h.entry = key[len(prefixes[i]):]
		}
		return nil
	}
	for i, p := range prefixes {
		start := ""
		if after != "" {
			start = p + after
		}
		n, stop := iter.Pull2(s.ListAfter(ctx, p, start))
		heads[i] = &head{next: n, stop: stop}
		if err := advance(i); err != nil {
			return nil, "", err
		}
	}
	// smallest is the list whose head comes first, -1 when all are done.
	smallest := func() int {
		best := -1
		for i, h := range heads {
			if h.ok && (best < 0 || h.entry < heads[best].entry) {
				best = i
			}
		}
		return best
	}
	items = make([]T, 0, min(limit, 64))
	last := ""
	for n := 0; len(items) < limit && (budget <= 0 || n < budget); n++ {
		i := smallest()
		if i < 0 {
			return items, "", nil
		}
		entry := heads[i].entry
		item, ok, err := read(ctx, i, entry)
		if err != nil {
			return nil, "", err
		}
		if ok {
			items = append(items, item)
		}
		last = entry
		if err := advance(i); err != nil {
			return nil, "", err
		}
	}
	if smallest() < 0 {
		return items, "", nil
	}
	return items, layout.EncodeCursor(last), nil
}
