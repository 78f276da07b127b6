//go:build unix

package filestore

import (
	"fmt"
	"slices"
	"testing"
)

func TestSortedNames(t *testing.T) {
	t.Parallel()
	s := sortedNames{names: []string{"a", "b/", "c", "e"}}
	cases := []struct {
		bound     string
		inclusive bool
		want      int
	}{
		{"", true, 0},
		{"", false, 0},
		{"a", true, 0},
		{"a", false, 1},
		{"b", true, 1}, // "b" < "b/"
		{"b/", true, 1},
		{"b/", false, 2},
		{"b0", true, 2}, // "/" < "0"
		{"d", true, 3},
		{"e", false, 4},
		{"z", true, 4},
	}
	for _, tc := range cases {
		if got := s.seek(tc.bound, tc.inclusive); got != tc.want {
			t.Errorf("seek(%q, %v) = %d, want %d", tc.bound, tc.inclusive, got, tc.want)
		}
	}
	s.insert("d")
	s.insert("d")
	s.insert("f")
	s.insert("0")
	s.remove("b/")
	s.remove("x")
	if want := []string{"0", "a", "c", "d", "e", "f"}; !slices.Equal(s.names, want) {
		t.Fatalf("after inserts and removals: %v, want %v", s.names, want)
	}
	if !s.has("d") || s.has("b/") {
		t.Fatalf("has: %v", s.names)
	}
}

func TestBoundIn(t *testing.T) {
	t.Parallel()
	cases := []struct{ dir, bound, want string }{
		{"", "", ""},
		{"", "a", "a"},
		{"", "a/b/c", "a/"},
		{"a/", "a/b/c", "b/"},
		{"a/", "a/b", "b"},
		{"a/", "a/", ""},
		{"a/", "b/x", ""}, // outside: the whole directory
		{"a/b/", "a/", ""},
	}
	for _, tc := range cases {
		if got := boundIn(tc.dir, tc.bound); got != tc.want {
			t.Errorf("boundIn(%q, %q) = %q, want %q", tc.dir, tc.bound, got, tc.want)
		}
	}
}

// FuzzSortedNames runs insertions, removals and batches against a set:
// the names stay sorted and unique, and seek agrees with a scan.
func FuzzSortedNames(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 130, 5, 200, 7})
	f.Add([]byte{255, 254, 253, 1, 1, 1, 129, 129})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var s sortedNames
		set := map[string]bool{}
		name := func(b byte) string {
			n := fmt.Sprintf("n%02d", b%40)
			if b%3 == 0 {
				n += "/"
			}
			return n
		}
		for i := 0; i < len(ops); i++ {
			op := ops[i]
			switch {
			case op < 100:
				s.insert(name(op))
				set[name(op)] = true
			case op < 200:
				s.remove(name(op))
				delete(set, name(op))
			default: // a batch of the next bytes: more than mergeLimit changes some times
				var adds, removes []string
				n := int(op-200) * 4
				for j := 0; j < n && i+1 < len(ops); j++ {
					i++
					x := name(ops[i])
					if ops[i]%2 == 0 {
						adds = append(adds, x)
					} else if !slices.Contains(adds, x) {
						removes = append(removes, x)
					}
				}
				for _, r := range removes {
					delete(set, r)
				}
				for _, a := range adds {
					set[a] = true
				}
				s.apply(adds, removes)
			}
		}
		var want []string
		for n := range set {
			want = append(want, n)
		}
		slices.Sort(want)
		if !slices.Equal(s.names, want) {
			t.Fatalf("names %v, want %v", s.names, want)
		}
		for _, b := range []string{"", "n", "n05", "n05/", "n050", "n39/", "o"} {
			for _, inc := range []bool{true, false} {
				i := 0
				for i < len(want) && (want[i] < b || !inc && want[i] == b) {
					i++
				}
				if got := s.seek(b, inc); got != i {
					t.Fatalf("seek(%q, %v) = %d, want %d in %v", b, inc, got, i, want)
				}
			}
		}
	})
}
