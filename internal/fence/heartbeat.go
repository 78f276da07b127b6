package fence

import (
	"context"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// Heartbeat calls beat every interval after the lease's last renewal, as
// told by last, until stop is called, ctx ends or beat returns false (the
// lease is lost). Scheduling from the last renewal, not the last beat,
// means an owner write that renewed the lease postpones the beat, and an
// overdue beat (the process lagged) fires at once instead of drifting
// towards the lease's end. stop waits for a beat in progress.
func Heartbeat(ctx context.Context, clk clock.Clock, interval time.Duration, last func() time.Time, beat func(context.Context) bool) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	hctx := activity.Start(ctx, clk)
	go func() {
		ctx, end := activity.Enter(hctx, clk)
		defer end()
		defer close(done)
		for {
			t := clk.NewTimer(last().Add(interval).Sub(clk.Now()))
			resume := activity.Wait(ctx, clk, func() bool { return isClosed(quit) || ctx.Err() != nil || activity.Fired(t) })
			select {
			case <-quit:
				resume()
				t.Stop()
				return
			case <-ctx.Done():
				resume()
				t.Stop()
				return
			case <-t.C():
			}
			resume()
			if clk.Now().Before(last().Add(interval)) {
				continue // renewed meanwhile
			}
			if !beat(ctx) {
				return
			}
		}
	}()
	return func() {
		select {
		case <-quit:
		default:
			close(quit)
		}
		<-done
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
