package clock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var start = time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC)

func TestFakeTimersFireInOrderWhenDue(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	t1 := c.NewTimer(2 * time.Second)
	t2 := c.NewTimer(1 * time.Second)
	c.Advance(500 * time.Millisecond)
	select {
	case <-t2.C():
		t.Fatal("fired early")
	default:
	}
	c.Advance(time.Second)
	if got := <-t2.C(); !got.Equal(start.Add(time.Second)) {
		t.Errorf("t2 fired at %v", got)
	}
	if c.Pending() != 1 {
		t.Errorf("pending %d", c.Pending())
	}
	c.Advance(time.Second)
	if got := <-t1.C(); !got.Equal(start.Add(2 * time.Second)) {
		t.Errorf("t1 fired at %v", got)
	}
	if !c.Now().Equal(start.Add(2500 * time.Millisecond)) {
		t.Errorf("now %v", c.Now())
	}
}

func TestFakeStopAndAfterFunc(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	var calls atomic.Int32
	done := make(chan struct{})
	c.AfterFunc(time.Minute, func() { calls.Add(1); close(done) })
	stopped := c.AfterFunc(time.Minute, func() { calls.Add(100) })
	if !stopped.Stop() || stopped.Stop() {
		t.Error("Stop reports wrongly")
	}
	c.Advance(time.Minute)
	<-done
	if calls.Load() != 1 {
		t.Errorf("calls %d", calls.Load())
	}
}

func TestFakeWaitForTimers(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	ready := c.WaitForTimers(1)
	select {
	case <-ready:
		t.Fatal("WaitForTimers(1) closed with no timer scheduled")
	default:
	}
	fired := make(chan time.Time)
	go func() { fired <- <-c.NewTimer(time.Hour).C() }()
	<-ready
	if n := c.Pending(); n != 1 {
		t.Fatalf("Pending() = %d once WaitForTimers(1) closed, want 1", n)
	}
	select {
	case <-c.WaitForTimers(1):
	default:
		t.Fatal("WaitForTimers(1) with one timer already scheduled is not closed at once")
	}
	c.Advance(time.Hour)
	if got := <-fired; !got.Equal(start.Add(time.Hour)) {
		t.Errorf("timer fired at %v, want %v", got, start.Add(time.Hour))
	}
}

func TestFakeNext(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	if at, ok := c.Next(); ok {
		t.Fatalf("Next() = %v, true with no timer scheduled", at)
	}
	late := c.NewTimer(time.Hour)
	c.AfterFunc(time.Minute, func() {})
	early := c.NewTimer(time.Second)
	if at, ok := c.Next(); !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("Next() = %v, %v; want %v, true", at, ok, start.Add(time.Second))
	}
	early.Stop()
	if at, ok := c.Next(); !ok || !at.Equal(start.Add(time.Minute)) {
		t.Fatalf("after Stop: Next() = %v, %v; want %v, true", at, ok, start.Add(time.Minute))
	}
	c.Advance(time.Minute) // the AfterFunc fires
	if at, ok := c.Next(); !ok || !at.Equal(start.Add(time.Hour)) {
		t.Fatalf("after Advance: Next() = %v, %v; want %v, true", at, ok, start.Add(time.Hour))
	}
	c.Advance(time.Hour)
	<-late.C()
	if at, ok := c.Next(); ok {
		t.Fatalf("Next() = %v, true once every timer fired", at)
	}
}

func TestRealClock(t *testing.T) {
	t.Parallel()
	c := clock.Real()
	before := time.Now()
	if c.Now().Before(before) {
		t.Error("real clock behind")
	}
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	done := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(done) })
	<-done
}

// idleNow reports whether the fake clock's Activity reads idle.
func idleNow(c *clock.Fake) bool {
	idle, _ := activity.Of(c).Idle()
	return idle
}

func TestActivityCountsWorkAndWaits(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	if !idleNow(c) {
		t.Fatal("a fresh clock is busy")
	}
	ctx, end := activity.Enter(context.Background(), c)
	if idleNow(c) {
		t.Fatal("idle inside Enter")
	}
	// A nested entry point in the same goroutine shares the token.
	_, end2 := activity.Enter(ctx, c)
	end2()
	if idleNow(c) {
		t.Fatal("a nested end released the outer token")
	}
	tm := c.NewTimer(time.Second)
	resume := activity.Wait(ctx, c, func() bool { return activity.Fired(tm) })
	if !idleNow(c) {
		t.Fatal("busy while the only goroutine waits on a timer")
	}
	c.Advance(time.Second)
	// The timer fired: the waiter is ready, so the count is not idle even
	// before it resumes.
	if idleNow(c) {
		t.Fatal("idle between a timer firing and its waiter resuming")
	}
	<-tm.C()
	resume()
	if idleNow(c) {
		t.Fatal("idle after resume")
	}
	end()
	if !idleNow(c) {
		t.Fatal("busy after end")
	}
}

func TestActivityStartCoversTheGoStatement(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	ctx := activity.Start(context.Background(), c)
	if idleNow(c) {
		t.Fatal("idle between Start and the goroutine's Enter")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, end := activity.Enter(ctx, c) // adopts Start's token
		defer end()
		hctx, cancel := context.WithCancel(ctx)
		c.AfterFunc(time.Minute, cancel)
		_ = activity.Hang(hctx)
	}()
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	if d, ok, err := c.AdvanceToNext(wctx); err != nil || !ok || d != time.Minute {
		t.Fatalf("AdvanceToNext = %v %v %v", d, ok, err)
	}
	<-done
	if err := c.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
}

func TestActivityWithoutTokenOrFake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		c    clock.Clock
	}{
		{"real clock", clock.Real()},
		{"fake, caller outside any engine", clock.NewFake(start)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			activity.
				// A wait with no token in ctx changes nothing.
				Wait(context.Background(), tt.c, func() bool { return false })()
			if f, ok := tt.c.(*clock.Fake); ok && !idleNow(f) {
				t.Fatal("a wait without a token made the clock busy")
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := activity.Sleep(ctx, tt.c, time.Hour); err != context.Canceled {
				t.Fatalf("Sleep = %v", err)
			}
		})
	}
}
