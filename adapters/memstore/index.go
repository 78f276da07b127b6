package memstore

import (
	"math/rand/v2"
	"strings"
)

// index keeps the keys in byte order, so List and ListAfter cost O(log n + k) for
// the k keys they yield instead of a scan and sort of the whole store. It is a
// skip list; the Store's mutex guards it.
type index struct {
	head  node
	level int
	rng   *rand.Rand
	prev  [maxLevel]*node // scratch for insert and remove
}

const maxLevel = 24 // enough for 16M keys at p = 1/2

type node struct {
	key  string
	next [maxLevel]*node
}

func newIndex() *index {
	return &index{level: 1, rng: rand.New(rand.NewPCG(1, 2))}
}

// seek fills prev with the last node before key on every level and returns
// the first node whose key is >= key.
func (x *index) seek(key string) *node {
	n := &x.head
	for l := x.level - 1; l >= 0; l-- {
		for n.next[l] != nil && n.next[l].key < key {
			n = n.next[l]
		}
		x.prev[l] = n
	}
	return n.next[0]
}

// insert adds key; it must not be present.
func (x *index) insert(key string) {
	x.seek(key)
	lvl := 1
	for lvl < maxLevel && x.rng.Uint32()&1 == 1 {
		lvl++
	}
	for l := x.level; l < lvl; l++ {
		x.prev[l] = &x.head
	}
	if lvl > x.level {
		x.level = lvl
	}
	n := &node{key: key}
	for l := range lvl {
		n.next[l] = x.prev[l].next[l]
		x.prev[l].next[l] = n
	}
}

// remove deletes key if present.
func (x *index) remove(key string) {
	n := x.seek(key)
	if n == nil || n.key != key {
		return
	}
	for l := 0; l < x.level && x.prev[l].next[l] == n; l++ {
		x.prev[l].next[l] = n.next[l]
	}
}

// page returns up to n keys that start with prefix and sort strictly after
// after, in order; the caller has reduced after as storage.Store.ListAfter does.
func (x *index) page(prefix, after string, n int) []string {
	var keys []string
	for nd := x.seek(max(prefix, after)); nd != nil && len(keys) < n && strings.HasPrefix(nd.key, prefix); nd = nd.next[0] {
		if nd.key != after {
			keys = append(keys, nd.key)
		}
	}
	return keys
}
