// Package testdrive holds what the exported test helpers (run/runtest,
// jobqueue/jobqueuetest) share: a fake clock that knows the deadlines of its
// pending timers, a signal that wakes the helper's driver, a store that
// signals its writes, and the context mark behind their Hang functions.
package testdrive

import (
	"context"
	"iter"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Start is the fake time a helper's clock starts at.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Far is the interval the helpers give the timers that play no part in what
// a test observes (polls, heartbeats): they never come due in a test.
const Far = 10 * 365 * 24 * time.Hour

// Signal wakes a driver; kicks while it is busy collapse into one.
type Signal chan struct{}

// NewSignal returns a Signal.
func NewSignal() Signal { return make(Signal, 1) }

// Kick wakes the driver, never blocking.
func (s Signal) Kick() {
	select {
	case s <- struct{}{}:
	default:
	}
}

// Clock is a clock.Fake that records each pending timer's deadline and
// kind, and kicks a Signal whenever a timer is scheduled.
type Clock struct {
	fake *clock.Fake
	sig  Signal

	mu      sync.Mutex
	seq     uint64
	pending map[*timer]struct{}
}

type timer struct {
	c     *Clock
	inner clock.Timer
	at    time.Time
	d     time.Duration
	fn    bool // an AfterFunc timer
	seq   uint64
}

func (t *timer) C() <-chan time.Time { return t.inner.C() }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	delete(t.c.pending, t)
	return t.inner.Stop()
}

// NewClock returns a Clock at Start that kicks sig.
func NewClock(sig Signal) *Clock {
	return &Clock{fake: clock.NewFake(Start), sig: sig, pending: map[*timer]struct{}{}}
}

// Fake is the clock.Fake underneath.
func (c *Clock) Fake() *clock.Fake { return c.fake }

// Now returns the fake time.
func (c *Clock) Now() time.Time { return c.fake.Now() }

// NewTimer schedules a channel timer d from now.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	return c.schedule(d, false, func() clock.Timer { return c.fake.NewTimer(d) })
}

// AfterFunc schedules f d from now.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.schedule(d, true, func() clock.Timer { return c.fake.AfterFunc(d, f) })
}

func (c *Clock) schedule(d time.Duration, fn bool, make func() clock.Timer) clock.Timer {
	c.mu.Lock()
	c.seq++
	t := &timer{c: c, at: c.fake.Now().Add(d), d: d, fn: fn, seq: c.seq}
	t.inner = make()
	if d > 0 {
		c.pending[t] = struct{}{}
	}
	c.mu.Unlock()
	c.sig.Kick()
	return t
}

// Seq is the sequence number of the latest timer scheduled: a timer
// scheduled later has a greater one.
func (c *Clock) Seq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// Waiting reports whether a channel timer (NewTimer, as a retry backoff
// waits on) shorter than Far/2 was scheduled after seq and is pending.
func (c *Clock) Waiting(seq uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.pending {
		if !t.fn && t.seq > seq && t.d < Far/2 {
			return true
		}
	}
	return false
}

// AdvanceToNext moves the clock to the earliest pending deadline, firing
// what is due then, and reports by how much it moved; false when nothing is
// pending.
func (c *Clock) AdvanceToNext() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next *timer
	for t := range c.pending {
		if next == nil || t.at.Before(next.at) {
			next = t
		}
	}
	if next == nil {
		return 0, false
	}
	d := next.at.Sub(c.fake.Now())
	c.advanceLocked(d)
	return d, true
}

// Advance moves the clock by d, firing what is due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(d)
}

func (c *Clock) advanceLocked(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.fake.Advance(d)
	now := c.fake.Now()
	for t := range c.pending {
		if !t.at.After(now) {
			delete(c.pending, t)
		}
	}
}

// Store is a storage.Store that kicks a Signal after every write.
type Store struct {
	storage.Store
	Sig Signal
}

// Get reads through.
func (s Store) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	return s.Store.Get(ctx, key)
}

// Put writes through, then kicks.
func (s Store) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	defer s.Sig.Kick()
	return s.Store.Put(ctx, key, v, c)
}

// Delete deletes through, then kicks.
func (s Store) Delete(ctx context.Context, key string, c storage.Condition) error {
	defer s.Sig.Kick()
	return s.Store.Delete(ctx, key, c)
}

// List lists through.
func (s Store) List(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return s.Store.List(ctx, prefix)
}

type hangKey struct{}

// WithHang marks ctx so that Hang calls f before it waits.
func WithHang(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, hangKey{}, f)
}

// Hang tells the helper whose mark ctx carries that the caller now waits
// for ctx to end, then waits for it and returns ctx.Err().
func Hang(ctx context.Context) error {
	if f, ok := ctx.Value(hangKey{}).(func()); ok {
		f()
	}
	<-ctx.Done()
	return ctx.Err()
}
