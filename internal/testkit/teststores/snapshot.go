package teststores

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/runconveyor/conveyor/storage"
)

// Snapshot returns every key of s with its bytes, for tests that prove a
// refused call wrote nothing.
func Snapshot(tb testing.TB, s *storage.Store) map[string]string {
	tb.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for key, err := range s.List(ctx, "") {
		if err != nil {
			tb.Fatalf("snapshot: list: %v", err)
		}
		b, _, err := s.Get(ctx, key)
		if err != nil {
			tb.Fatalf("snapshot: get %s: %v", key, err)
		}
		out[key] = string(b)
	}
	return out
}

// Unchanged fails tb unless s holds exactly the keys and bytes of before
// (a Snapshot): nothing created, changed or deleted.
func Unchanged(tb testing.TB, s *storage.Store, before map[string]string) {
	tb.Helper()
	after := Snapshot(tb, s)
	for _, key := range slices.Sorted(maps.Keys(after)) {
		old, ok := before[key]
		switch {
		case !ok:
			tb.Errorf("store changed: %s created (%d bytes)", key, len(after[key]))
		case old != after[key]:
			tb.Errorf("store changed: %s rewritten (%d → %d bytes)", key, len(old), len(after[key]))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(before)) {
		if _, ok := after[key]; !ok {
			tb.Errorf("store changed: %s deleted", key)
		}
	}
}
