package jobqueue

import (
	"regexp"
	"testing"
	"time"
)

// TestNewUUIDIsVersion7 checks the shape of a generated job id (RFC 9562
// version 7: the time's milliseconds first, then random bits) and that ids
// of later milliseconds sort after earlier ones.
func TestNewUUIDIsVersion7(t *testing.T) {
	t.Parallel()
	shape := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	prev := ""
	seen := map[string]bool{}
	for i := range 1000 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		id := newUUID(now)
		if !shape.MatchString(id) {
			t.Fatalf("newUUID = %q: not a version 7 UUID", id)
		}
		if want := time.UnixMilli(now.UnixMilli()).UTC(); idTime(t, id) != want {
			t.Fatalf("newUUID(%s) = %q carries %s", now, id, idTime(t, id))
		}
		if id <= prev {
			t.Fatalf("newUUID at +%dms = %q sorts before the id of the millisecond before, %q", i, id, prev)
		}
		if seen[id] {
			t.Fatalf("newUUID gave %q twice", id)
		}
		seen[id], prev = true, id
	}
	// Within one millisecond the rest is random: no two alike.
	a, b := newUUID(t0), newUUID(t0)
	if a == b || a[:13] != b[:13] {
		t.Fatalf("two ids of one millisecond: %q and %q (same time prefix, different ids expected)", a, b)
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
