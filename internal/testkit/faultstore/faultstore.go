// Package faultstore wraps a driver (usually a storage.Store) with
// switchable faults, for the fault suites: outages, while which every call fails the way a stopped
// server fails (an *storage.OpError whose cause is a refused connection), so
// the engines see exactly what they see when MinIO stops; and the faults of
// a store that settles (a distributed MinIO after a node restart or a
// killed writer): false not-found reads and create-only writes accepted
// over an existing key, deterministically, within a bound it reports as
// driver.Settler.
package faultstore

import (
	"context"
	"iter"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Store is a driver (package storage/driver) that can be taken down and
// brought back up; storage.New makes the Store engines call over it.
type Store struct {
	driver.Store

	mu    sync.Mutex
	down  bool
	next  int // fail this many calls more, down or not
	calls atomic.Int64
	fails atomic.Int64
	set   settling
}

// New wraps inner, usually a Store; it starts up.
func New(inner driver.Store) *Store { return &Store{Store: inner} }

// Down makes every call fail until Up.
func (s *Store) Down() { s.mu.Lock(); s.down = true; s.mu.Unlock() }

// Up ends an outage.
func (s *Store) Up() { s.mu.Lock(); s.down = false; s.mu.Unlock() }

// FailNext makes the next n calls fail, after which the store is up.
func (s *Store) FailNext(n int) { s.mu.Lock(); s.next = n; s.mu.Unlock() }

// Failed counts the calls refused so far.
func (s *Store) Failed() int64 { return s.fails.Load() }

func (s *Store) refuse(op, key string) error {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down && s.next == 0 {
		return nil
	}
	if s.next > 0 {
		s.next--
	}
	s.fails.Add(1)
	return &storage.OpError{Op: op, Key: key, Cause: syscall.ECONNREFUSED}
}

// Get implements driver.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if err := s.refuse("get", key); err != nil {
		return nil, "", err
	}
	if s.set.armed() {
		return s.settlingGet(ctx, key)
	}
	return s.Store.Get(ctx, key)
}

// Put implements driver.Store.
func (s *Store) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if err := s.refuse("put", key); err != nil {
		return "", err
	}
	if s.set.armed() {
		return s.settlingPut(ctx, key, value, cond)
	}
	return s.Store.Put(ctx, key, value, cond)
}

// Delete implements driver.Store.
func (s *Store) Delete(ctx context.Context, key string, cond storage.Condition) error {
	if err := s.refuse("delete", key); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key, cond)
}

// ListAfter implements driver.Store.
func (s *Store) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	if err := s.refuse("list", prefix); err != nil {
		return func(yield func(string, error) bool) { yield("", err) }
	}
	if s.set.armed() {
		return s.settlingList(ctx, prefix, after)
	}
	return s.Store.ListAfter(ctx, prefix, after)
}

// Unwrap returns the wrapped driver (driver.Unwrapper).
func (s *Store) Unwrap() driver.Store { return s.Store }
