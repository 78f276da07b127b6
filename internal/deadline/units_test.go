package deadline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

func TestUnitsAbandonCodeThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	u := &deadline.Units{Clock: clk}
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := deadline.Do(context.Background(), u, "step research", time.Minute, func(context.Context) (int, error) {
			<-release // ignores its context
			return 1, nil
		})
		done <- err
	}()
	<-clk.WaitForTimers(1)
	clk.Advance(time.Minute)
	err := <-done
	var oe *deadline.OverrunError
	if !errors.As(err, &oe) || !errors.Is(err, context.DeadlineExceeded) || oe.Limit != time.Minute {
		t.Fatalf("Do = %v, want an OverrunError at 1m", err)
	}
	if live, total := u.Stragglers(); live != 1 || total != 1 {
		t.Fatalf("Stragglers = %d, %d; want 1 live of 1", live, total)
	}
	grace, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if n := u.Wait(grace); n != 1 {
		t.Fatalf("Wait with a straggler = %d, want 1 (bounded by its context)", n)
	}
	close(release)
	if n := u.Wait(context.Background()); n != 0 {
		t.Fatalf("Wait after the straggler returned = %d", n)
	}
	if live, total := u.Stragglers(); live != 0 || total != 1 {
		t.Fatalf("Stragglers = %d, %d; want 0 live of 1", live, total)
	}
}

func TestUnitsResults(t *testing.T) {
	t.Parallel()
	u := &deadline.Units{Clock: clock.NewFake(t0)}
	boom := errors.New("boom")
	tests := []struct {
		name string
		fn   func(context.Context) (int, error)
		ctx  func() context.Context
		want func(int, error) bool
	}{
		{"value", func(context.Context) (int, error) { return 7, nil }, context.Background,
			func(v int, err error) bool { return v == 7 && err == nil }},
		{"error", func(context.Context) (int, error) { return 0, boom }, context.Background,
			func(_ int, err error) bool { return errors.Is(err, boom) }},
		{"panic", func(context.Context) (int, error) { panic("bad step") }, context.Background,
			func(_ int, err error) bool {
				var pe *deadline.PanicError
				return errors.As(err, &pe) && pe.Value == "bad step"
			}},
		{"caller canceled", func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() },
			func() context.Context {
				ctx, cancel := context.WithCancelCause(context.Background())
				cancel(boom)
				return ctx
			},
			func(_ int, err error) bool { return errors.Is(err, boom) }},
	}
	for _, tt := range tests {
		v, err := deadline.Do(tt.ctx(), u, tt.name, time.Hour, tt.fn)
		if !tt.want(v, err) {
			t.Errorf("%s: Do = %v, %v", tt.name, v, err)
		}
	}
	u.Wait(context.Background())
}

// Units that return exactly as their limit strikes are either taken or
// abandoned, never both: the count of live stragglers ends at zero once
// every goroutine has returned (found by review: a unit returning between
// the caller's last look and its abandonment stayed counted for good).
func TestUnitsCountIsExactAtTheLimit(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	u := &deadline.Units{Clock: clk}
	for range 2000 {
		release := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = deadline.Do(context.Background(), u, "racy", time.Second, func(context.Context) (int, error) {
				<-release
				return 1, nil
			})
		}()
		<-clk.WaitForTimers(1)
		go clk.Advance(time.Second)
		close(release) // races the limit
		<-done
	}
	if n := u.Wait(context.Background()); n != 0 {
		t.Fatalf("Wait = %d", n)
	}
	if live, _ := u.Stragglers(); live != 0 {
		t.Fatalf("%d stragglers counted live after every unit returned", live)
	}
}
