// Package memstore is an in-memory storage.Store for tests and examples. It
// keeps nothing across restarts and is shared only within one process.
// It watches (storage.Store's Watch): a write signals the watchers of its
// key before the write returns.
package memstore

import (
	"context"
	"iter"
	"slices"
	"strconv"
	"sync"

	"github.com/runconveyor/conveyor/internal/origin"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// memDriver is the in-memory driver (package storage/driver) under the
// Store New returns. The zero value is not usable.
type memDriver struct {
	mu    sync.RWMutex
	data  map[string]entry
	order *index // the keys in byte order, for List
	seq   uint64 // version counter shared by all keys, so versions never repeat
	// watches are the open Watch channels; writes signal them under mu.
	watches map[*watch]struct{}
}

type entry struct {
	value   []byte
	version driver.Version
}

var (
	_ driver.Store   = (*memDriver)(nil)
	_ driver.Watcher = (*memDriver)(nil)
)

// New returns an empty Store.
func New() *storage.Store { return storage.New(newDriver()) }

// NewDriver returns an empty in-memory driver (package storage/driver),
// the one under the Store New returns, for tests that wrap a driver; it
// also implements driver.Watcher.
func NewDriver() driver.Store { return newDriver() }

func newDriver() *memDriver { return &memDriver{data: make(map[string]entry), order: newIndex()} }

// Get implements driver.Store.
func (s *memDriver) Get(ctx context.Context, key string) ([]byte, driver.Version, error) {
	s.mu.RLock()
	e, ok := s.data[key]
	s.mu.RUnlock()
	if !ok {
		return nil, "", storage.ErrNotFound
	}
	return slices.Clone(e.value), e.version, nil
}

// Put implements driver.Store.
func (s *memDriver) Put(ctx context.Context, key string, value []byte, cond driver.Condition) (driver.Version, error) {
	v := slices.Clone(value)
	if v == nil {
		v = []byte{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[key]
	if !cond.Holds(e.version) {
		return "", storage.ErrPreconditionFailed
	}
	s.seq++
	ver := driver.Version("m" + strconv.FormatUint(s.seq, 10))
	if !ok {
		s.order.insert(key)
	}
	s.data[key] = entry{value: v, version: ver}
	s.notify(key, origin.Of(ctx))
	return ver, nil
}

// Delete implements driver.Store.
func (s *memDriver) Delete(ctx context.Context, key string, cond driver.Condition) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[key]
	if !cond.Holds(e.version) {
		return storage.ErrPreconditionFailed
	}
	if ok {
		delete(s.data, key)
		s.order.remove(key)
		s.notify(key, origin.Of(ctx))
	}
	return nil
}

// listPage is how many keys ListAfter takes from the index per
// hold of the lock, so a caller that stops early pays for about a page,
// not for every key after its cursor.
const listPage = 256

// ListAfter implements driver.Store. It seeks the sorted index (O(log n))
// and takes the keys a page at a time, each page a snapshot taken when it
// is read.
func (s *memDriver) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for {
			// seek writes the index's scratch space: take the write lock.
			s.mu.Lock()
			keys := s.order.page(prefix, after, listPage)
			s.mu.Unlock()
			for _, k := range keys {
				if err := ctx.Err(); err != nil {
					yield("", err)
					return
				}
				if !yield(k, nil) {
					return
				}
			}
			if len(keys) < listPage {
				return
			}
			after = keys[len(keys)-1]
		}
	}
}
