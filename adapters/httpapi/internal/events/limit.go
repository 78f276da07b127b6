package events

import (
	"context"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// limiter paces the events that replays read, across all clients: a token
// bucket of rate tokens a second holding at most one second's worth. A
// wait takes its tokens at once, going into debt, and sleeps until the
// debt is paid, so waiters are served in the order they came and one page
// never waits for another's tokens to accumulate first.
type limiter struct {
	clock  clock.Clock
	rate   float64 // tokens per second
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// newLimiter returns a limiter of rate tokens a second, or nil (no limit)
// for a negative rate.
func newLimiter(c clock.Clock, rate int) *limiter {
	if rate < 0 {
		return nil
	}
	return &limiter{clock: c, rate: float64(rate), tokens: float64(rate), last: c.Now()}
}

// wait takes n tokens, waiting until they are paid for or ctx ends.
func (l *limiter) wait(ctx context.Context, n int) error {
	if l == nil {
		return ctx.Err()
	}
	l.mu.Lock()
	now := l.clock.Now()
	if now.After(l.last) {
		l.tokens = min(l.rate, l.tokens+now.Sub(l.last).Seconds()*l.rate)
		l.last = now
	}
	l.tokens -= float64(n)
	debt := -l.tokens
	l.mu.Unlock()
	if debt <= 0 {
		return ctx.Err()
	}
	t := l.clock.NewTimer(time.Duration(debt / l.rate * float64(time.Second)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
