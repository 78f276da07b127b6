//go:build unix

package filestore

import (
	"slices"
	"sort"
	"strings"
)

// indexMin is the size from which a directory a cursor lists inside is
// indexed (Linux): below it, reading its names costs less than keeping
// them.
const indexMin = 1000

// sortedNames is the listing index's copy of one directory: its entries'
// names in byte order, a directory's with a "/" appended, so that the
// order of the names is the order of the keys under them (every key below
// a directory starts with its name and a "/"). Names starting with ".cnv"
// (locks, writes in progress) are never in it.
type sortedNames struct {
	names []string
}

// seek returns the index of the first name >= bound (> bound when
// inclusive is false).
func (s *sortedNames) seek(bound string, inclusive bool) int {
	if inclusive {
		return sort.SearchStrings(s.names, bound)
	}
	return sort.Search(len(s.names), func(i int) bool { return s.names[i] > bound })
}

// has reports whether name is in s.
func (s *sortedNames) has(name string) bool {
	i := sort.SearchStrings(s.names, name)
	return i < len(s.names) && s.names[i] == name
}

// insert adds name unless it is there. Names come mostly in order (audit
// events are named by time), so the usual insert is an append.
func (s *sortedNames) insert(name string) {
	n := len(s.names)
	if n == 0 || s.names[n-1] < name {
		s.names = append(s.names, name)
		return
	}
	i := sort.SearchStrings(s.names, name)
	if i < n && s.names[i] == name {
		return
	}
	s.names = slices.Insert(s.names, i, name)
}

// remove deletes name if it is there.
func (s *sortedNames) remove(name string) {
	i := sort.SearchStrings(s.names, name)
	if i < len(s.names) && s.names[i] == name {
		s.names = slices.Delete(s.names, i, i+1)
	}
}

// mergeLimit is the number of changes above which apply rebuilds the
// slice in one pass instead of moving its tail once per change.
const mergeLimit = 64

// apply inserts adds and removes removes (a name in both is added: the
// caller found it present). One pass over the names when the changes are
// many, else one insert or removal each.
func (s *sortedNames) apply(adds, removes []string) {
	if len(adds)+len(removes) <= mergeLimit {
		for _, r := range removes {
			s.remove(r)
		}
		for _, a := range adds {
			s.insert(a)
		}
		return
	}
	slices.Sort(adds)
	adds = slices.Compact(adds)
	gone := make(map[string]struct{}, len(removes))
	for _, r := range removes {
		gone[r] = struct{}{}
	}
	for _, a := range adds {
		delete(gone, a)
	}
	out := make([]string, 0, len(s.names)+len(adds))
	i, j := 0, 0
	for i < len(s.names) || j < len(adds) {
		var next string
		switch {
		case j == len(adds) || (i < len(s.names) && s.names[i] < adds[j]):
			next = s.names[i]
			i++
		case i == len(s.names) || adds[j] < s.names[i]:
			next = adds[j]
			j++
		default: // equal
			next = s.names[i]
			i++
			j++
		}
		if _, ok := gone[next]; !ok {
			out = append(out, next)
		}
	}
	s.names = out
}

// boundIn is the lowest name of the directory dir ("" for the root, else
// ending in "/") that a key starting with bound, or sorting after it, can
// be under: bound's segment in dir, with its "/" when bound goes deeper.
// A bound outside dir gives "" (the whole directory).
func boundIn(dir, bound string) string {
	if len(bound) <= len(dir) || !strings.HasPrefix(bound, dir) {
		return ""
	}
	rest := bound[len(dir):]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[:i+1]
	}
	return rest
}
