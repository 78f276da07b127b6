// Package memstore is an in-memory storage.Store for tests and examples. It
// keeps nothing across restarts and is shared only within one process.
// It implements storage.Watcher: a write signals the watchers of its key
// before the write returns.
package memstore

import (
	"context"
	"iter"
	"slices"
	"strconv"
	"sync"

	"github.com/runconveyor/conveyor/storage"
)

// Store is an in-memory storage.Store. The zero value is not usable; call New.
type Store struct {
	mu    sync.RWMutex
	data  map[string]entry
	order *index // the keys in byte order, for List
	seq   uint64 // version counter shared by all keys, so versions never repeat
	// watches are the open Watch channels; writes signal them under mu.
	watches map[*watch]struct{}
}

type entry struct {
	value   []byte
	version storage.Version
}

var (
	_ storage.Store   = (*Store)(nil)
	_ storage.Watcher = (*Store)(nil)
)

// New returns an empty Store.
func New() *Store { return &Store{data: make(map[string]entry), order: newIndex()} }

// Get implements storage.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if err := storage.CheckOp(ctx, "get", key); err != nil {
		return nil, "", err
	}
	s.mu.RLock()
	e, ok := s.data[key]
	s.mu.RUnlock()
	if !ok {
		return nil, "", storage.NewOpError("get", key, storage.ErrNotFound, nil)
	}
	return slices.Clone(e.value), e.version, nil
}

// Put implements storage.Store.
func (s *Store) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if err := storage.CheckOp(ctx, "put", key); err != nil {
		return "", err
	}
	if err := storage.CheckCondition("put", key, cond); err != nil {
		return "", err
	}
	v := slices.Clone(value)
	if v == nil {
		v = []byte{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[key]
	if !cond.Holds(e.version) {
		return "", storage.NewOpError("put", key, storage.ErrPreconditionFailed, nil)
	}
	s.seq++
	ver := storage.Version("m" + strconv.FormatUint(s.seq, 10))
	if !ok {
		s.order.insert(key)
	}
	s.data[key] = entry{value: v, version: ver}
	s.notify(key)
	return ver, nil
}

// Delete implements storage.Store.
func (s *Store) Delete(ctx context.Context, key string, cond storage.Condition) error {
	if err := storage.CheckOp(ctx, "delete", key); err != nil {
		return err
	}
	if err := storage.CheckCondition("delete", key, cond); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[key]
	if !cond.Holds(e.version) {
		return storage.NewOpError("delete", key, storage.ErrPreconditionFailed, nil)
	}
	if ok {
		delete(s.data, key)
		s.order.remove(key)
		s.notify(key)
	}
	return nil
}

// listPage is how many keys List and ListAfter take from the index per
// hold of the lock, so a caller that stops early pays for about a page,
// not for every key after its cursor.
const listPage = 256

// List implements storage.Store: ListAfter from the start.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return s.ListAfter(ctx, prefix, "")
}

// ListAfter implements storage.Store. It seeks the sorted index (O(log n))
// and takes the keys a page at a time, each page a snapshot taken when it
// is read.
func (s *Store) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := storage.CheckAfter(ctx, prefix, after); err != nil {
			yield("", err)
			return
		}
		after, none := storage.ListStart(prefix, after)
		for !none {
			// seek writes the index's scratch space: take the write lock.
			s.mu.Lock()
			keys := s.order.page(prefix, after, listPage)
			s.mu.Unlock()
			for _, k := range keys {
				if err := ctx.Err(); err != nil {
					yield("", storage.NewOpError("list", prefix, err, nil))
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
