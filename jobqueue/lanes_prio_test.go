package jobqueue

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
)

// TestNextKey: of a lane in key order, a claim takes the first ready entry
// (the highest priority with one, its earliest), else names the entry ready
// first; a malformed key is taken at once (to be deleted).
func TestNextKey(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	key := func(p int, after time.Duration, id string) string {
		k, err := layout.PriorityLaneKey("a", p, t0.Add(after), id)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	many := func(p int, after time.Duration, n int) []string {
		var ks []string
		for i := range n {
			ks = append(ks, key(p, after+time.Duration(i), fmt.Sprintf("m%d-%04d", p, i)))
		}
		return ks
	}
	tests := []struct {
		name      string
		keys      []string
		want      string
		ready     bool
		readyWant string // readyFirst's
	}{
		{"one ready", []string{key(5, 0, "a")}, key(5, 0, "a"), true, key(5, 0, "a")},
		{"higher ready first", []string{key(9, 0, "h"), key(5, -time.Second, "d")}, key(9, 0, "h"), true, key(5, -time.Second, "d")},
		{"higher not ready", []string{key(9, time.Minute, "h"), key(5, 0, "d")}, key(5, 0, "d"), true, key(5, 0, "d")},
		{"many not ready above one ready", append(append(many(8, time.Hour, 300), many(6, time.Minute, 300)...), many(2, 0, 3)...),
			key(2, 0, "m2-0000"), true, key(2, 0, "m2-0000")},
		{"none ready: the one ready first", []string{key(9, time.Hour, "h"), key(5, time.Minute, "d"), key(1, 2*time.Minute, "l")},
			key(5, time.Minute, "d"), false, key(5, time.Minute, "d")},
		{"malformed first", []string{"queue/lanes/a/!x-zz", key(5, time.Minute, "d")}, "queue/lanes/a/!x-zz", true, "queue/lanes/a/!x-zz"},
	}
	for _, tt := range tests {
		if !slices.IsSorted(tt.keys) {
			t.Fatalf("%s: keys not in key order", tt.name)
		}
		got, _, ready := nextKey(tt.keys, t0)
		if got != tt.want || ready != tt.ready {
			t.Errorf("%s: nextKey = %q %v, want %q %v", tt.name, got, ready, tt.want, tt.ready)
		}
		if got, _ := readyFirst(tt.keys); got != tt.readyWant {
			t.Errorf("%s: readyFirst = %q, want %q", tt.name, got, tt.readyWant)
		}
	}
}
