package clock_test

import (
	"sync/atomic"
	"testing"
	"time"

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
