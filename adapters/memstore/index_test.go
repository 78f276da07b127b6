package memstore

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/storekey"
)

// TestIndexMatchesModel drives the skip list and a sorted-set model with
// the same random inserts, removes and prefix queries from
// random cursors.
func TestIndexMatchesModel(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	x := newIndex()
	model := map[string]bool{}
	key := func() string {
		parts := []string{"a", "ab", "b", "jobs", "jobs/q", "z"}
		return parts[rng.IntN(len(parts))] + "/" + string(rune('a'+rng.IntN(20)))
	}
	for i := range 20000 {
		k := key()
		switch rng.IntN(3) {
		case 0, 1:
			if !model[k] {
				x.insert(k)
				model[k] = true
			}
		case 2:
			x.remove(k)
			delete(model, k)
		}
		if i%100 == 0 {
			prefix := key()[:rng.IntN(4)]
			after := ""
			if rng.IntN(2) == 0 {
				k := key()
				after = k[:1+rng.IntN(len(k))]
			}
			start, none := storekey.ListStart(prefix, after)
			var want []string
			for m := range model {
				if strings.HasPrefix(m, prefix) && m > after {
					want = append(want, m)
				}
			}
			slices.Sort(want)
			var got []string
			if !none {
				got = x.page(prefix, start, len(model)+1)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d prefix %q after %q: got %v, want %v", i, prefix, after, got, want)
			}
		}
	}
}
