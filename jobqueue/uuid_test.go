package jobqueue

import (
	"regexp"
	"testing"
	"time"
)

// TestNewUUIDIsVersion7 checks the shape of a generated job id (RFC 9562
// version 7: the time's milliseconds first, then a sequence and random
// bits), that it carries the time it was made, and that every id sorts
// after the one made before it, within a millisecond too.
func TestNewUUIDIsVersion7(t *testing.T) {
	t.Parallel()
	shape := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	prev := ""
	seen := map[string]bool{}
	for range 5000 {
		before := time.UnixMilli(time.Now().UnixMilli())
		id := newUUID()
		after := time.Now()
		if !shape.MatchString(id) {
			t.Fatalf("newUUID = %q: not a version 7 UUID", id)
		}
		// The sequence may carry an id a millisecond past now when more
		// than about 4,000 are made in one.
		if at := idTime(t, id); at.Before(before) || at.After(after.Add(time.Millisecond)) {
			t.Fatalf("newUUID between %s and %s = %q carries %s", before, after, id, at)
		}
		if id <= prev {
			t.Fatalf("newUUID = %q sorts before the id made before it, %q", id, prev)
		}
		if seen[id] {
			t.Fatalf("newUUID gave %q twice", id)
		}
		seen[id], prev = true, id
	}
}

// idTime reads the milliseconds a version 7 id carries.
func idTime(t *testing.T, id string) time.Time {
	t.Helper()
	var ms int64
	for _, c := range id[:8] + id[9:13] {
		v := int64(c - '0')
		if c >= 'a' {
			v = int64(c-'a') + 10
		}
		ms = ms<<4 | v
	}
	return time.UnixMilli(ms).UTC()
}
