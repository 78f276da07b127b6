// Package clock lets code that waits (leases, timeouts, TTLs, backoff) run on
// a fake clock in tests, so those tests take milliseconds.
//
// The Runner (run.Config.Clock), the job Queue (jobqueue.Config.Clock),
// the inbox and the artifact store all accept a Clock. A test of your own
// steps or handlers passes a Fake and moves it with AdvanceToNext (or
// WaitIdle, then Advance): no sleeps, no real idleness, no guessing.
//
// The Fake knows when the code under test is idle. The SDK's engines (the
// Runner's loop and executions, a job claim's run, the Worker's loops, the
// step units, heartbeats and store retries) count their work on the Fake:
// a goroutine counts as working until it waits on a timer of the clock or
// on a wake-up, whose readiness stays visible until it resumes, so the
// count never reads idle between a wake-up and the woken goroutine
// running. User code run by an engine (a step, a handler) is inside that
// work; one that stands for an upstream that never answers waits with
// conveyortest.Hang. WaitIdle returns once nothing works and no waiter is
// ready: then moving the clock cannot race the code's work. On Real
// nothing is counted.
package clock

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
)

// Clock tells the time and schedules work. Real is the wall clock; Fake is
// moved by hand.
type Clock interface {
	Now() time.Time
	// NewTimer fires once, d from now, on the returned timer's channel.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine, d from now, unless stopped.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a scheduled event of a Clock.
type Timer interface {
	// C delivers the time the timer fired at; nil for AfterFunc timers.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// Real returns the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{t: time.NewTimer(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{t: time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// Fake is a Clock that moves only when told to. It is safe for concurrent use.
type Fake struct {
	tracker // the engines find act through it
	act     *activity.Activity
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	waiters []waiter
}

type waiter struct {
	n  int
	ch chan struct{}
}

// NewFake returns a fake clock that reads start.
func NewFake(start time.Time) *Fake {
	a := activity.New()
	return &Fake{tracker: activity.Track(a), now: start, act: a}
}

// tracker lets the engines find the Fake's count of work in progress
// without a method of the Fake's.
type tracker = activity.Tracker

// WaitIdle waits until the code waiting on this clock is idle (see the
// package doc) or ctx ends: then moving the clock cannot race its work.
func (f *Fake) WaitIdle(ctx context.Context) error { return f.act.WaitIdle(ctx) }

// AdvanceToNext waits until the code waiting on this clock is idle, then
// moves the clock to the earliest scheduled timer, firing what is due
// then, and reports by how much it moved: 0 and false when no timer is
// scheduled (or ctx ended first, with its error).
func (f *Fake) AdvanceToNext(ctx context.Context) (time.Duration, bool, error) {
	if err := f.WaitIdle(ctx); err != nil {
		return 0, false, err
	}
	next, ok := f.Next()
	if !ok {
		return 0, false, nil
	}
	d := max(next.Sub(f.Now()), 0)
	f.Advance(d)
	return d, true, nil
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer schedules a timer d after the fake now.
func (f *Fake) NewTimer(d time.Duration) Timer {
	return f.schedule(d, &fakeTimer{clock: f, ch: make(chan time.Time, 1)})
}

// AfterFunc schedules fn d after the fake now.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	return f.schedule(d, &fakeTimer{clock: f, fn: fn})
}

func (f *Fake) schedule(d time.Duration, t *fakeTimer) Timer {
	f.mu.Lock()
	t.at = f.now.Add(d)
	if d <= 0 {
		f.mu.Unlock()
		t.fire(t.at)
		return t
	}
	f.timers = append(f.timers, t)
	f.notifyLocked()
	f.mu.Unlock()
	return t
}

// Advance moves the clock forward by d, firing every timer due by then in
// time order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	var due []*fakeTimer
	kept := f.timers[:0]
	for _, t := range f.timers {
		if !t.at.After(now) {
			due = append(due, t)
		} else {
			kept = append(kept, t)
		}
	}
	f.timers = kept
	f.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.fire(t.at)
	}
	f.act.Poke()
}

// Pending reports how many timers are scheduled and not yet fired or stopped.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Next returns the time the earliest scheduled timer is due, and false when
// none is scheduled: a test that waits until the code under test is waiting
// on the clock can then advance it straight to the next event.
func (f *Fake) Next() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.timers) == 0 {
		return time.Time{}, false
	}
	next := f.timers[0].at
	for _, t := range f.timers[1:] {
		if t.at.Before(next) {
			next = t.at
		}
	}
	return next, true
}

// WaitForTimers returns a channel closed once at least n timers are
// scheduled: a test uses it to know the code under test has started waiting
// before it advances the clock.
func (f *Fake) WaitForTimers(n int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{})
	if len(f.timers) >= n {
		close(ch)
		return ch
	}
	f.waiters = append(f.waiters, waiter{n: n, ch: ch})
	return ch
}

func (f *Fake) notifyLocked() {
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if len(f.timers) >= w.n {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
}

type fakeTimer struct {
	clock *Fake
	at    time.Time
	ch    chan time.Time
	fn    func()
	fired atomic.Bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// Fired tells whether the timer fired: a wait of the engines may use it
// in its ready function, since once true it stays true.
func (t *fakeTimer) Fired() bool { return t.fired.Load() }

func (t *fakeTimer) Stop() bool {
	f := t.clock
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.timers {
		if x == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			return true
		}
	}
	return false
}

func (t *fakeTimer) fire(at time.Time) {
	t.fired.Store(true)
	if t.fn != nil {
		// The function counts as work while it runs: what it starts (a
		// context it cancels) is seen before the count can read zero.
		a := t.clock.act
		a.Add(1)
		go func() {
			defer a.Add(-1)
			t.fn()
		}()
		return
	}
	t.ch <- at // buffered, fires once
}
