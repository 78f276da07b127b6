// Package activity counts the work in progress of the code that waits on
// a clock, so that a test moves a fake clock (lifecycle/clock's Fake) only
// when that code is idle. The SDK's engines report to it: a goroutine holds
// a token while it works (Enter, or Start before the go statement that
// starts it) and lends it back only while it waits on a timer of the clock
// or on a wake-up (Wait), whose readiness stays visible until it resumes.
// On a clock without an Activity (the real one) every call does nothing.
package activity

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Activity counts the work in progress of the code that waits on a clock,
// so that a test moves a fake clock only when that code is idle: every
// goroutine it started is blocked waiting on the clock (a timer) or on a
// wake-up that only the test or the clock can give. The Fake has one
// (found with Of); the SDK's engines report to it through Enter, Start
// and Wait. On any other clock (Real) those calls do nothing.
//
// The count is of tokens. A goroutine of an engine holds one while it
// works (Enter, or Start before the go statement that starts it) and
// lends it back while it waits (Wait). A wait says what would end it with
// a ready function that must stay true, once true, until the waiter
// resumes: a done context, a closed channel, a fired timer of the clock
// (Fired), a flag set under a lock. So a wake-up never leaves the count at
// zero between the wake and the waiter running: the waker holds its
// token until after it made the waiter ready, and a ready waiter counts
// as busy. Timers of the Fake that fire and AfterFunc functions while
// they run count as busy too.
type Activity struct {
	mu      sync.Mutex
	busy    int
	waits   map[*wait]struct{}
	changed chan struct{} // closed at the next change
	gen     uint64
}

type wait struct{ ready func() bool }

// New returns an Activity with nothing in progress.
func New() *Activity {
	return &Activity{waits: map[*wait]struct{}{}, changed: make(chan struct{})}
}

// changedLocked wakes whoever watches the count.
func (a *Activity) changedLocked() {
	a.gen++
	close(a.changed)
	a.changed = make(chan struct{})
}

// Add takes (n > 0) or gives back (n < 0) n tokens.
func (a *Activity) Add(n int) {
	a.mu.Lock()
	a.busy += n
	a.changedLocked()
	a.mu.Unlock()
}

// Poke tells watchers that something they may check changed (a timer
// fired, time moved).
func (a *Activity) Poke() {
	a.mu.Lock()
	a.changedLocked()
	a.mu.Unlock()
}

// Idle reports whether nothing works: no token is busy and no waiter is
// ready to resume. It also returns a channel closed at the next change of
// the count (a token taken or lent back, a timer fired), to wait on when
// it is not.
func (a *Activity) Idle() (bool, <-chan struct{}) {
	for {
		a.mu.Lock()
		changed, gen := a.changed, a.gen
		if a.busy > 0 {
			a.mu.Unlock()
			return false, changed
		}
		ws := make([]*wait, 0, len(a.waits))
		for w := range a.waits {
			ws = append(ws, w)
		}
		a.mu.Unlock()
		// Outside the lock: a ready function may take the engine's locks.
		for _, w := range ws {
			if w.ready() {
				return false, changed // it resumes: a change follows
			}
		}
		a.mu.Lock()
		same := a.gen == gen
		a.mu.Unlock()
		if same {
			return true, changed
		}
	}
}

// WaitIdle waits until nothing works (see Idle) or ctx ends.
func (a *Activity) WaitIdle(ctx context.Context) error {
	for {
		idle, changed := a.Idle()
		if idle {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// token is one goroutine's share of the count.
type token struct {
	a       *Activity
	adopted atomic.Bool
}

type tokenKey struct{}

func tokenOf(ctx context.Context, a *Activity) *token {
	if ctx == nil {
		return nil
	}
	t, _ := ctx.Value(tokenKey{}).(*token)
	if t == nil || t.a != a {
		return nil
	}
	return t
}

// Clock is what the helpers take a clock as: lifecycle/clock's Clock.
type Clock interface{ Now() time.Time }

// Tracker gives a clock its Activity: the Fake, and clocks wrapping one,
// embed it under an unexported alias, so that Of finds the Activity
// without a method on the clock's API.
type Tracker struct{ a *Activity }

// Track is the Tracker of a.
func Track(a *Activity) Tracker { return Tracker{a: a} }

func (t Tracker) activity() *Activity { return t.a }

// tracked is a clock that embeds a Tracker.
type tracked interface{ activity() *Activity }

// Of is the Activity of c, a clock that embeds a Tracker; nil for any
// other clock.
func Of(c any) *Activity {
	if t, ok := c.(tracked); ok {
		return t.activity()
	}
	return nil
}

func activityOf(c Clock) *Activity { return Of(c) }

func noop() {}

// Enter starts, for the goroutine that calls it, the busy span of an
// engine's entry point (a loop, a job's run): until end is called, what it
// does counts as work on c. It takes the token ctx carries from Start if
// that one is not taken yet; it shares the token of ctx when its goroutine
// holds one already (an entry point called from inside an engine); else it
// takes a new one. The returned ctx carries the token, for Wait. On a
// clock without an Activity it returns ctx and a no-op.
func Enter(ctx context.Context, c Clock) (context.Context, func()) {
	a := activityOf(c)
	if a == nil {
		return ctx, noop
	}
	if t := tokenOf(ctx, a); t != nil {
		if t.adopted.CompareAndSwap(false, true) {
			var once sync.Once
			return ctx, func() { once.Do(func() { a.Add(-1) }) }
		}
		return ctx, noop // the caller's goroutine holds it
	}
	a.Add(1)
	t := &token{a: a}
	t.adopted.Store(true)
	var once sync.Once
	return context.WithValue(ctx, tokenKey{}, t), func() { once.Do(func() { a.Add(-1) }) }
}

// Start takes, before a go statement, the token of the goroutine it
// starts, and returns the context to start it with: the goroutine calls
// Enter with it first, and counts as busy from this call on, so the count
// never reads zero between the go statement and the goroutine running.
func Start(ctx context.Context, c Clock) context.Context {
	a := activityOf(c)
	if a == nil {
		return ctx
	}
	a.Add(1)
	return context.WithValue(ctx, tokenKey{}, &token{a: a})
}

// Wait lends the token of ctx's goroutine back while it waits: call it
// just before blocking and the returned resume just after. ready tells
// whether the wait is over (see Activity for what it may look at); it is
// called from other goroutines. Without a token in ctx (a caller outside
// the engine) it does nothing. A nil c means the clock of ctx's token:
// code run by an engine (a step, a handler) that waits for its test, not
// for the clock, says so with Wait(ctx, nil, ready).
func Wait(ctx context.Context, c Clock, ready func() bool) (resume func()) {
	var t *token
	if c == nil {
		t, _ = ctx.Value(tokenKey{}).(*token)
	} else if a := activityOf(c); a != nil {
		t = tokenOf(ctx, a)
	}
	if t == nil || !t.adopted.Load() {
		return noop
	}
	return t.a.park(ready)
}

// park lends one token back until the returned resume.
func (a *Activity) park(ready func() bool) (resume func()) {
	w := &wait{ready: ready}
	a.mu.Lock()
	a.waits[w] = struct{}{}
	a.busy--
	a.changedLocked()
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		if _, ok := a.waits[w]; ok {
			delete(a.waits, w)
			a.busy++
			a.changedLocked()
		}
		a.mu.Unlock()
	}
}

// Sleep waits d on c, or until ctx ends (returning ctx's error), counted
// as a wait of ctx's goroutine (see Wait).
func Sleep[T timer](ctx context.Context, c interface{ NewTimer(time.Duration) T }, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	var clk Clock
	if cc, ok := c.(Clock); ok {
		clk = cc
	}
	defer Wait(ctx, clk, func() bool { return ctx.Err() != nil || Fired(t) })()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// Hang waits until ctx ends and returns its error, counted as a wait of
// ctx's goroutine: code under test that stands for an upstream that never
// answers hangs with it, so a test on a Fake sees it idle and moves the
// clock to its deadline. Outside a goroutine of an engine it is just
// <-ctx.Done().
func Hang(ctx context.Context) error {
	if t, _ := ctx.Value(tokenKey{}).(*token); t != nil && t.adopted.Load() {
		defer t.a.park(func() bool { return ctx.Err() != nil })()
	}
	<-ctx.Done()
	return ctx.Err()
}

// Fired tells whether t, a timer of a Fake (or of a clock wrapping one),
// has fired; false for any other timer. Once true it stays true, so a
// wait may use it in its ready function.
func Fired(t any) bool {
	if f, ok := t.(interface{ Fired() bool }); ok {
		return f.Fired()
	}
	return false
}

// timer is what Sleep needs of a clock's timer: lifecycle/clock's Timer.
type timer interface {
	C() <-chan time.Time
	Stop() bool
}
