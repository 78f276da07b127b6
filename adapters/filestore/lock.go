//go:build unix

package filestore

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// keyLocks is a Store's writer locking: an in-process table of the keys
// its goroutines are writing, in front of a cross-process lock per key
// (xlocks). A writer first waits its turn in the table, where the wait is
// a channel and ends with its context, costing no system call; only then
// does it take the cross-process lock, so of one process's writers at
// most one at a time asks the kernel for a key's lock, and within a
// process nobody polls.
//
// The table is keyed by the key's slot, a 62-bit hash: on Linux the
// cross-process lock is a byte-range lock at that offset of one shared
// file, and byte-range locks of one open file description do not exclude
// each other, so two goroutines must never hold one slot at a time.
// Two keys sharing a slot (odds 2^-62 a pair) only wait for each other.
type keyLocks struct {
	x xlocks

	mu    sync.Mutex
	slots map[uint64]*slotLock
}

type slotLock struct {
	held chan struct{} // one token: the holder's
	refs int           // goroutines holding or waiting; the entry goes at 0
}

func newKeyLocks(x xlocks) *keyLocks {
	return &keyLocks{x: x, slots: map[uint64]*slotLock{}}
}

// slotOf is the lock slot of key: the same in every process.
func slotOf(key string) uint64 {
	h := uint64(14695981039346656037) // FNV-1a, 64 bits
	for i := range len(key) {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return h >> 2 // a non-negative offset, with room for its byte
}

// lock takes the writer lock of key, stored at path, waiting until
// another goroutine or process releases it or ctx ends. The returned func
// releases it.
func (l *keyLocks) lock(ctx context.Context, key, path string) (func(), error) {
	slot := slotOf(key)
	l.mu.Lock()
	e := l.slots[slot]
	if e == nil {
		e = &slotLock{held: make(chan struct{}, 1)}
		l.slots[slot] = e
	}
	e.refs++
	l.mu.Unlock()
	select {
	case e.held <- struct{}{}:
	default:
		select {
		case e.held <- struct{}{}:
		case <-ctx.Done():
			l.leave(slot, e)
			return nil, ctx.Err()
		}
	}
	unlockX, err := l.x.lock(ctx, slot, path)
	if err != nil {
		<-e.held
		l.leave(slot, e)
		return nil, err
	}
	return func() {
		unlockX()
		<-e.held
		l.leave(slot, e)
	}, nil
}

func (l *keyLocks) leave(slot uint64, e *slotLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(l.slots, slot)
	}
}

// pollLock takes a cross-process lock with try, which reports false while
// another process holds it, polling with growing sleeps (50 µs to 5 ms)
// so that the wait ends with ctx even if the holder is a paused process.
// Only writers of different processes contend here: within a process,
// keyLocks queues them first.
func pollLock(ctx context.Context, try func() (bool, error)) error {
	wait := 50 * time.Microsecond
	for {
		ok, err := try()
		if ok || err != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, 5*time.Millisecond)
	}
}

// busy reports whether a non-blocking lock call failed because another
// holds the lock (or was interrupted): poll again.
func busy(err error) bool {
	return errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EAGAIN) ||
		errors.Is(err, unix.EACCES) || errors.Is(err, unix.EINTR)
}

// lockPrefix names a key's lock file, beside its value file: the
// cross-process lock where there are no open file description locks
// (lock_other.go), and on Linux a leftover of the versions before
// .cnvlocks, which a deletion removes so its directory can go too.
const lockPrefix = ".cnvlock-"

func lockPathOf(path string) string {
	return filepath.Join(filepath.Dir(path), lockPrefix+filepath.Base(path))
}
