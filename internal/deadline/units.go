package deadline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// ErrOverrun is matched by the error of a unit of user code that did not
// return within its limit.
var ErrOverrun = errors.New("conveyor: unit overran its deadline")

// OverrunError is a unit abandoned at its deadline.
type OverrunError struct {
	Unit  string
	Limit time.Duration
}

// Error names the unit and its limit.
func (e *OverrunError) Error() string {
	return fmt.Sprintf("conveyor: %s exceeded its %s limit", e.Unit, e.Limit)
}

// Is matches ErrOverrun and context.DeadlineExceeded, so code that checks
// for a deadline sees one.
func (e *OverrunError) Is(target error) bool {
	return target == ErrOverrun || target == context.DeadlineExceeded
}

// PanicError is a unit whose code panicked; the stack is kept for the log.
type PanicError struct {
	Unit  string
	Value any
	Stack []byte
}

// Error names the unit and the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("conveyor: %s panicked: %v", e.Unit, e.Value) }

// Units runs units of user code (a step, a job handler) under deadlines
// and accounts for the goroutines of units it abandoned: Go cannot stop a
// goroutine, so one that ignores its context lives on, but it is counted,
// logged when abandoned and when it finally returns, and its result is
// discarded, so it can never write through the engine again. The zero
// value is not usable; set Clock. Safe for concurrent use.
type Units struct {
	// Clock times the deadlines. Required.
	Clock clock.Clock
	// Log receives unit_abandoned and unit_returned_late at WARN; nil
	// discards.
	Log *slog.Logger

	mu        sync.Mutex
	running   int           // unit goroutines alive, abandoned or not
	idle      chan struct{} // closed while running == 0
	abandoned int           // of running, those abandoned
	total     int64         // abandoned since start
}

// Stragglers reports how many abandoned units are still running, and how
// many units were abandoned in all.
func (u *Units) Stragglers() (live int, total int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.abandoned, u.total
}

// Wait waits until no unit goroutine is running or ctx ends, and reports
// how many are still running (abandoned ones included). Shutdown calls it
// with a grace period: it never waits longer than ctx allows.
func (u *Units) Wait(ctx context.Context) int {
	u.mu.Lock()
	if u.running == 0 {
		u.mu.Unlock()
		return 0
	}
	idle := u.idle
	u.mu.Unlock()
	select {
	case <-idle:
		return 0
	case <-ctx.Done():
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.running
	}
}

func (u *Units) started() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.running == 0 {
		u.idle = make(chan struct{})
	}
	u.running++
}

func (u *Units) ended(abandoned bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.running--
	if abandoned {
		u.abandoned--
	}
	if u.running == 0 {
		close(u.idle)
	}
}

func (u *Units) abandon() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.abandoned++
	u.total++
}

// Do runs fn as the unit named name, in its own goroutine, with a context
// that ends at limit (cause: an *OverrunError) or when ctx ends. It returns
// fn's result when fn returns first. At the deadline it returns the
// *OverrunError at once, and when ctx ends first it returns
// context.Cause(ctx) at once: in both cases fn is abandoned (counted in
// Stragglers until it returns) and whatever it returns later is dropped. A
// panic in fn is returned as a *PanicError. limit <= 0 means no limit but
// ctx's. Do arms the deadline and waits; the hand-over of the result,
// which decides once between taking it and abandoning the unit, is call's.
func Do[T any](ctx context.Context, u *Units, name string, limit time.Duration, fn func(context.Context) (T, error)) (T, error) {
	uctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if limit > 0 {
		t := u.Clock.AfterFunc(limit, func() { cancel(&OverrunError{Unit: name, Limit: limit}) })
		defer t.Stop()
	}
	c := &call[T]{u: u, name: name, ch: make(chan result[T], 1)}
	u.started()
	// The unit's goroutine counts as work on the clock from here (a test's
	// fake clock moves only when it is idle, as in activity.Hang); the
	// caller's wait below does not, until the unit returned or the
	// deadline struck.
	uctx = activity.Start(uctx, u.Clock)
	go c.run(uctx, fn)
	resume := activity.Wait(ctx, u.Clock, func() bool { return c.hasReturned() || uctx.Err() != nil })
	select {
	case res := <-c.ch:
		resume()
		return overran(uctx, res)
	case <-uctx.Done():
	}
	resume()
	if res, ok := c.leave(); ok { // returned in the same instant: keep it
		return overran(uctx, res)
	}
	cause := context.Cause(uctx)
	if u.Log != nil {
		u.Log.LogAttrs(ctx, slog.LevelWarn, "unit_abandoned", slog.String("unit", name), slog.String("cause", cause.Error()))
	}
	var zero T
	return zero, cause
}

type result[T any] struct {
	v   T
	err error
}

// overran gives a failure that comes with the deadline as the deadline's,
// and a context error that comes with the caller's cancellation as its
// cause, as an abandoned unit gives them: code that honours its context
// returns ctx.Err() just as the limit strikes or the caller leaves, and
// which of the two Do sees first must not change the answer.
func overran[T any](uctx context.Context, res result[T]) (T, error) {
	if res.err == nil || uctx.Err() == nil {
		return res.v, res.err
	}
	cause := context.Cause(uctx)
	var oe *OverrunError
	if errors.As(cause, &oe) {
		return res.v, oe
	}
	if errors.Is(res.err, context.Canceled) || errors.Is(res.err, context.DeadlineExceeded) {
		return res.v, cause
	}
	return res.v, res.err
}

// call is one unit's hand-over between its goroutine and Do. One lock
// decides, once, whether the caller takes the result or abandons the unit:
// either the goroutine finished first (returned) and the caller takes its
// result, or the caller left first and the goroutine, when it ends, is
// accounted as late. The deadline, the cancel, the straggler count and the
// result channel are one protocol: run and leave are its two sides, and
// nothing leaks or is counted twice because each side looks at the other's
// flag under the one lock.
type call[T any] struct {
	u    *Units
	name string
	ch   chan result[T] // buffered (1): run never blocks

	mu       sync.Mutex
	returned bool      // the goroutine has its result
	left     bool      // the caller returned without the result
	at       time.Time // when the caller left
}

// run is the unit's goroutine: it calls fn and hands its result (or its
// panic) over, logging a late return when the caller already left.
func (c *call[T]) run(uctx context.Context, fn func(context.Context) (T, error)) {
	uctx, end := activity.Enter(uctx, c.u.Clock)
	var res result[T]
	defer end() // after the result is handed over: the caller is ready first
	defer func() {
		if p := recover(); p != nil {
			res = result[T]{err: &PanicError{Unit: c.name, Value: p, Stack: debug.Stack()}}
		}
		c.mu.Lock()
		late := c.left
		c.returned = true
		c.ch <- res // buffered: never blocks
		c.mu.Unlock()
		c.u.ended(late)
		if late && c.u.Log != nil {
			c.u.Log.LogAttrs(context.Background(), slog.LevelWarn, "unit_returned_late", slog.String("unit", c.name),
				slog.Duration("late_by", c.u.Clock.Now().Sub(c.at)))
		}
	}()
	res.v, res.err = fn(uctx)
}

func (c *call[T]) hasReturned() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.returned
}

// leave is the caller's side once the unit's context ended: the result,
// when the goroutine returned in the same instant, or the unit abandoned
// (ok false).
func (c *call[T]) leave() (res result[T], ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.returned {
		return <-c.ch, true
	}
	c.left, c.at = true, c.u.Clock.Now()
	c.u.abandon()
	return res, false
}
