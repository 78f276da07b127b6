package conveyortest

// What the helpers share: a fake clock that knows the deadlines of its
// pending timers, the driver that moves it whenever the code under test is
// idle (activity.Activity), never on a guess, and the context mark behind Hang.

import (
	"context"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// start is the fake time a helper's clock starts at.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// far is the interval the helpers give the timers that play no part in what
// a test observes (polls, heartbeats): they never come due in a test.
const far = 10 * 365 * 24 * time.Hour

// background is how far off a timer is one of those: the driver never
// moves the clock to it.
const background = far / 100

// fakeClock is a clock.Fake that records each pending timer's deadline.
type fakeClock struct {
	tracker // the fake's: the engines count their work there
	fake    *clock.Fake

	mu      sync.Mutex
	pending map[*timer]struct{}
}

type timer struct {
	c     *fakeClock
	inner clock.Timer
	at    time.Time
	d     time.Duration
}

func (t *timer) C() <-chan time.Time { return t.inner.C() }

// Fired tells whether the timer fired (see activity.Fired).
func (t *timer) Fired() bool { return activity.Fired(t.inner) }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	delete(t.c.pending, t)
	return t.inner.Stop()
}

// newClock returns a fakeClock at start.
func newClock() *fakeClock {
	fake := clock.NewFake(start)
	return &fakeClock{tracker: activity.Track(activity.Of(fake)), fake: fake, pending: map[*timer]struct{}{}}
}

// tracker lets the engines find the fake's count of work in progress.
type tracker = activity.Tracker

// Now returns the fake time.
func (c *fakeClock) Now() time.Time { return c.fake.Now() }

// NewTimer schedules a channel timer d from now.
func (c *fakeClock) NewTimer(d time.Duration) clock.Timer {
	return c.schedule(d, func() clock.Timer { return c.fake.NewTimer(d) })
}

// AfterFunc schedules f d from now.
func (c *fakeClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.schedule(d, func() clock.Timer { return c.fake.AfterFunc(d, f) })
}

func (c *fakeClock) schedule(d time.Duration, make func() clock.Timer) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.fake.Now().Add(d), d: d}
	t.inner = make()
	if d > 0 {
		c.pending[t] = struct{}{}
	}
	return t
}

// advanceToNext moves the clock to the earliest pending deadline that is
// not a background timer's, firing what is due then; false when there is
// none.
func (c *fakeClock) advanceToNext() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next *timer
	for t := range c.pending {
		if t.d < background && (next == nil || t.at.Before(next.at)) {
			next = t
		}
	}
	if next == nil {
		return false
	}
	c.advanceLocked(next.at.Sub(c.fake.Now()))
	return true
}

// Advance moves the clock by d, firing what is due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(d)
}

func (c *fakeClock) advanceLocked(d time.Duration) {
	c.fake.Advance(max(d, 0))
	now := c.fake.Now()
	for t := range c.pending {
		if !t.at.After(now) {
			delete(c.pending, t)
		}
	}
}

// drive is a helper's driver loop: whenever the code under test is idle
// (every goroutine it started waits on the clock or for the test), it asks
// done whether what the test waits for happened, and if not moves the
// clock to the next deadline the code waits for. It returns when done
// says so or end is closed. When nothing changes for stall of real time
// it calls stuck, whose message (if any) it fails with; it fails anyway
// after hardStall without a change, or when the code is idle with nothing
// left to wait for.
func (c *fakeClock) drive(stall time.Duration, done func() bool, end <-chan struct{}, stuck func(idle bool) string, fail func(string)) {
	act := activity.Of(c.fake)
	watchdog := time.NewTimer(stall)
	defer watchdog.Stop()
	last := time.Now()
	progress := func() {
		last = time.Now()
		watchdog.Reset(stall)
	}
	for {
		idle, changed := act.Idle()
		if idle {
			if done() {
				return
			}
			if c.advanceToNext() {
				progress()
				continue
			}
		}
		select {
		case <-end:
			return
		case <-changed:
			progress()
		case <-watchdog.C:
			idle, _ := act.Idle()
			if msg := stuck(idle); msg != "" {
				fail(msg)
				return
			}
			if idle || time.Since(last) > hardStall {
				fail("")
				return
			}
			watchdog.Reset(stall)
		}
	}
}

// hardStall bounds, in real time, how long the driver waits for code
// under test that works (it is not idle) but changes nothing: a step or
// handler that blocks without Hang is reported sooner, by stuck.
const hardStall = time.Minute

type hangKey struct{}

// withHang marks ctx so that Hang calls f before it waits.
func withHang(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, hangKey{}, f)
}
