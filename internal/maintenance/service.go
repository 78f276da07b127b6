package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// Service is a maintenance service: one pass at a time, every period.
type Service interface {
	// Maintenance returns the part every service shares.
	Maintenance() *Base
	// RunOnce makes one pass, or nothing when none is due here (another
	// process's turn, a period not yet over). An error is logged by Run,
	// and the next pass tries again.
	RunOnce(ctx context.Context) error
}

// Base is what every service shares, embedded in each.
type Base struct {
	// Name names the service in its log lines: a failed pass is logged
	// at WARN as Name+"_failed".
	Name string
	// Attrs are put on every line Run logs (the worker that sweeps).
	Attrs []slog.Attr
	// Clock is the clock the period is waited on.
	Clock clock.Clock
	// Logger receives the failed passes.
	Logger *slog.Logger
	// Period is the wait between two passes.
	Period time.Duration
	// Delay makes the first pass wait a Period too, rather than come at
	// once.
	Delay bool
}

// Maintenance returns b.
func (b *Base) Maintenance() *Base { return b }

// Run calls svc.RunOnce every period until ctx ends, and returns nil then.
// It counts as work on the clock except while it waits (activity.Enter), so
// a test on a fake clock moves time only once the service is idle.
func Run(ctx context.Context, svc Service) error {
	b := svc.Maintenance()
	ctx, end := activity.Enter(ctx, b.Clock)
	defer end()
	if b.Delay && activity.Sleep(ctx, b.Clock, b.Period) != nil {
		return nil
	}
	for {
		b.failed(ctx, svc.RunOnce(ctx))
		if activity.Sleep(ctx, b.Clock, b.Period) != nil {
			return nil
		}
	}
}

// failed logs a pass that failed, but for one its context ended.
func (b *Base) failed(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil {
		attrs := append([]slog.Attr{slog.String("error", err.Error())}, b.Attrs...)
		b.Logger.LogAttrs(ctx, slog.LevelWarn, b.Name+"_failed", attrs...)
	}
}

// Ticker drives a service from the loop of its host rather than a loop of
// its own (the Runner's index repair, from the Runner's poll: an idle
// Runner waits on one timer). Tick makes a pass once the Period has passed
// since the last, the first a Period after the first Tick (or at once with
// Delay unset); a clock that went back makes one too. Only one goroutine
// may call Tick.
type Ticker struct {
	Service Service
	last    time.Time
	ticked  bool
}

// Tick makes the pass due at now, if any, and logs it as Run does when it
// failed.
func (t *Ticker) Tick(ctx context.Context, now time.Time) {
	b := t.Service.Maintenance()
	if !t.ticked {
		t.ticked, t.last = true, now
		if b.Delay {
			return
		}
	} else if now.Sub(t.last) < b.Period && !now.Before(t.last) {
		return
	}
	t.last = now
	b.failed(ctx, t.Service.RunOnce(ctx))
}

// Start runs Run in a goroutine of its own, counted busy on the clock from
// this call, until stop is called or ctx ends; stop waits for it to
// return.
func Start(ctx context.Context, svc Service) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	ctx = activity.Start(ctx, svc.Maintenance().Clock)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Run(ctx, svc)
	}()
	return func() { cancel(); <-done }
}
