package machine

// table is the non-generic core of a machine's lookups, on plain strings so
// generic dictionaries stay off the hot path: Check runs on every status write
// and must not allocate.
//
// A state's position is found by a perfect hash over a few bytes of its
// name confirmed by one comparison or, for a machine whose names defeat
// every multiplier tried, by the map. (An identity fast path keyed on the
// address of a constant's bytes was removed: states decoded from JSON never
// hit it, and on that production path it cost time, see BenchmarkCheckDecoded.)
type table struct {
	names    []string
	mult     uint32
	slots    [indexSlots]int8 // position+1; 0 is empty
	byName   map[string]int
	next     []uint64 // next[i] bit j: names[i] → names[j] is in the table
	terminal uint64   // bit i: names[i] is terminal
}

const (
	indexBits  = 7
	indexSlots = 1 << indexBits
)

// multipliers are odd constants tried in order until one hashes every state
// of a machine to its own slot.
var multipliers = [...]uint32{0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1, 0xD3A2646D, 0xFD7046C5, 0xB55A4F09}

func fingerprint(s string) uint32 {
	n := uint(len(s))
	return uint32(n)<<24 ^ uint32(s[0])<<16 ^ uint32(s[n>>1])<<8 ^ uint32(s[n-1])
}

// hashNames picks a multiplier under which every name has its own slot.
func (t *table) hashNames() {
	for _, mult := range multipliers {
		var slots [indexSlots]int8
		ok := true
		for i, s := range t.names {
			h := (fingerprint(s) * mult) >> (32 - indexBits)
			if slots[h] != 0 {
				ok = false
				break
			}
			slots[h] = int8(i + 1)
		}
		if ok {
			t.mult, t.slots = mult, slots
			return
		}
	}
	t.mult = 0 // use byName
}

// find returns the position of s, or -1.
func (t *table) find(s string) int {
	if t.mult == 0 || len(s) == 0 {
		return t.findSlow(s)
	}
	p := int(t.slots[(fingerprint(s)*t.mult)>>(32-indexBits)]) - 1
	if uint(p) >= uint(len(t.names)) || t.names[p] != s {
		return -1
	}
	return p
}

// findSlow is kept out of line so that find stays small enough to inline.
//
//go:noinline
func (t *table) findSlow(s string) int {
	if i, ok := t.byName[s]; ok {
		return i
	}
	return -1
}

// allowed tells whether from → to is in the table.
func (t *table) allowed(from, to string) bool { return t.allowedHashed(from, to) }

// allowedHashed looks both names up by their fingerprint. The lookups are
// written out, not called, so the two independent load chains overlap.
func (t *table) allowedHashed(from, to string) bool {
	if t.mult == 0 || len(from) == 0 || len(to) == 0 {
		return t.allowedSlow(from, to)
	}
	i := int(t.slots[(fingerprint(from)*t.mult)>>(32-indexBits)]) - 1
	j := int(t.slots[(fingerprint(to)*t.mult)>>(32-indexBits)]) - 1
	if uint(i) >= uint(len(t.names)) || uint(j) >= uint(len(t.names)) {
		return false
	}
	return t.next[i]&(1<<j) != 0 && t.names[i] == from && t.names[j] == to
}

//go:noinline
func (t *table) allowedSlow(from, to string) bool {
	i, j := t.find(from), t.find(to)
	return i >= 0 && j >= 0 && t.next[i]&(1<<j) != 0
}
