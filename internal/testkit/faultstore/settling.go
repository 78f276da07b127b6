package faultstore

import (
	"context"
	"errors"
	"iter"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// The faults of a store that settles (driver.Settler), injected
// deterministically: a Get of an existing key that answers ErrNotFound, and
// a create-only Put accepted over an existing key (the write lands and
// returns a version), and a listing that leaves out matching keys
// (ShortList: counted only). Nothing else is faulted: a compare-and-swap
// (IfMatch) is never ignored. Faults apply only to keys the
// predicate set by Match accepts (every key when none is set), and come
// from two sources:
//
//   - counted: the next n Gets of an existing matching key (FalseNotFound)
//     or the next n create-only Puts over one (AcceptCreateOver), whenever
//     they happen. Counted faults ignore the bound: a test spacing two reads
//     Settle apart can fool any evidence with FalseNotFound(2), so use them
//     to show what ONE wrong answer does;
//   - a disturbance (Disturb): every matching Get of an existing key and
//     every matching create-only Put over one is faulted from that instant
//     until Settle later (half open: a call at exactly disturbance+Settle is
//     answered truly), which is the fault model's bound.

type settling struct {
	mu        sync.Mutex
	settle    time.Duration
	now       func() time.Time
	match     func(key string) bool
	notFound  int       // counted false 404s left
	overwrite int       // counted accepted creates-over-existing left
	short     int       // counted short listings left
	until     time.Time // end of the current disturbance window
	falseNF   int64
	doubles   int64
	shorts    int64
}

// Settle implements driver.Settler: the bound set by SetSettle, or until
// then the wrapped store's (so a plain fault store hides nothing).
func (s *Store) Settle() time.Duration {
	s.set.mu.Lock()
	d := s.set.settle
	s.set.mu.Unlock()
	if d > 0 {
		return d
	}
	return storage.New(s.Store).SettleTime()
}

// SetSettle sets the bound Settle reports and the length of a disturbance
// window; now is the clock windows are measured on (a fake clock's Now in
// tests driven by one; nil means time.Now).
func (s *Store) SetSettle(d time.Duration, now func() time.Time) {
	s.set.mu.Lock()
	defer s.set.mu.Unlock()
	s.set.settle, s.set.now = d, now
}

// Match limits the settling faults to keys pred accepts (nil: every key).
func (s *Store) Match(pred func(key string) bool) {
	s.set.mu.Lock()
	s.set.match = pred
	s.set.mu.Unlock()
}

// FalseNotFound makes the next n Gets of existing matching keys answer
// ErrNotFound.
func (s *Store) FalseNotFound(n int) { s.set.mu.Lock(); s.set.notFound = n; s.set.mu.Unlock() }

// AcceptCreateOver makes the next n create-only Puts over existing matching
// keys land, as if the key were missing.
func (s *Store) AcceptCreateOver(n int) { s.set.mu.Lock(); s.set.overwrite = n; s.set.mu.Unlock() }

// ShortList makes the next n listings that would name a matching key
// leave out every matching key, as a listing of a store that settles may
// for a moment.
func (s *Store) ShortList(n int) { s.set.mu.Lock(); s.set.short = n; s.set.mu.Unlock() }

// Disturb opens a window of Settle from now (a node stopped, a writer
// killed mid-request) in which every matching read of an existing key
// answers not found and every matching create-only Put over one lands.
func (s *Store) Disturb() {
	s.set.mu.Lock()
	defer s.set.mu.Unlock()
	s.set.until = s.set.nowLocked().Add(s.set.settle)
}

// Calm ends faults: the disturbance window and any counted faults left.
func (s *Store) Calm() {
	s.set.mu.Lock()
	defer s.set.mu.Unlock()
	s.set.until, s.set.notFound, s.set.overwrite, s.set.short = time.Time{}, 0, 0, 0
}

// Tally counts the settling faults injected so far.
type Tally struct {
	FalseNotFounds int64 // Gets answered not found for an existing key
	DoubleCreates  int64 // create-only Puts accepted over an existing key
	ShortLists     int64 // listings that left matching keys out
}

// Total is every fault counted, so a test can fail when it provoked none.
func (t Tally) Total() int64 { return t.FalseNotFounds + t.DoubleCreates + t.ShortLists }

// Faults returns the settling faults injected so far.
func (s *Store) Faults() Tally {
	s.set.mu.Lock()
	defer s.set.mu.Unlock()
	return Tally{FalseNotFounds: s.set.falseNF, DoubleCreates: s.set.doubles, ShortLists: s.set.shorts}
}

func (t *settling) nowLocked() time.Time {
	if t.now == nil {
		return time.Now()
	}
	return t.now()
}

// take reports whether the call on key (an existing key) gets its fault,
// consuming a counted one when that is what applies.
func (t *settling) take(key string, counted *int, tally *int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.match != nil && !t.match(key) {
		return false
	}
	switch {
	case *counted > 0:
		*counted--
	case !t.until.IsZero() && t.nowLocked().Before(t.until):
	default:
		return false
	}
	*tally++
	return true
}

// armed tells whether any settling fault could apply, so an idle fault
// store costs the inner store no extra call.
func (t *settling) armed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.notFound > 0 || t.overwrite > 0 || t.short > 0 || !t.until.IsZero()
}

// settlingList is ListAfter with ShortList's fault: a listing whose
// matching keys are left out uses one fault up, counted once.
func (s *Store) settlingList(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		short := false
		for key, err := range s.Store.ListAfter(ctx, prefix, after) {
			if err == nil && s.set.shortens(key, &short) {
				continue
			}
			if !yield(key, err) {
				return
			}
		}
	}
}

// shortens reports whether a listing leaves key out; *short says whether
// this listing already took its fault.
func (t *settling) shortens(key string, short *bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.match != nil && !t.match(key) {
		return false
	}
	if *short {
		return true
	}
	if t.short == 0 {
		return false
	}
	t.short--
	t.shorts++
	*short = true
	return true
}

func (s *Store) settlingGet(ctx context.Context, key string) ([]byte, storage.Version, error) {
	b, v, err := s.Store.Get(ctx, key)
	if err == nil && s.set.take(key, &s.set.notFound, &s.set.falseNF) {
		return nil, "", &storage.OpError{Op: "get", Key: key, Kind: storage.ErrNotFound}
	}
	return b, v, err
}

func (s *Store) settlingPut(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	v, err := s.Store.Put(ctx, key, value, cond)
	if cond.Kind() != driver.CreateOnly || !errors.Is(err, storage.ErrPreconditionFailed) {
		return v, err
	}
	if !s.set.take(key, &s.set.overwrite, &s.set.doubles) {
		return v, err
	}
	return s.Store.Put(ctx, key, value, storage.Condition{})
}
