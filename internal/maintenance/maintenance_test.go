package maintenance_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/maintenance"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// doc is a turn's record: a lease, when the next turn is due, a cursor.
type doc struct {
	lifecycle.Meta

	Lease  lifecycle.Lease `json:"lease"`
	Next   time.Time       `json:"next"`
	Cursor string          `json:"cursor,omitempty"`
}

func (d *doc) TurnLease() *lifecycle.Lease { return &d.Lease }

var t0 = time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)

func turn(s *storage.Store, clk clock.Clock, owner string) *maintenance.Turn[doc, *doc] {
	return &maintenance.Turn[doc, *doc]{Store: s, Key: "m/turn.json", Owner: owner, Clock: clk, TTL: time.Minute, Lapse: true,
		Due: func(d *doc, now time.Time) bool { return !now.Before(d.Next) },
		Quarantine: func(ctx context.Context, ce *lifecycle.QuarantinedError) error {
			_, err := records.Quarantine(ctx, s, ce, clk.Now())
			return err
		}}
}

// TestTurn: of two processes one takes the turn; the other takes it once
// the lease lapsed, one epoch on, and the first then writes nothing; a
// turn released is not due again until its record says so; a record that
// does not decode is quarantined and the turn made anew.
func TestTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	a, b := turn(s, clk, "a"), turn(s, clk, "b")

	recA, before, after, err := a.Take(ctx)
	if err != nil || before.Lease.Epoch != 0 || after.Lease.Epoch != 1 || after.Lease.Owner != "a" {
		t.Fatalf("a's first take: %+v -> %+v, %v", before.Lease, after.Lease, err)
	}
	if _, _, _, err := b.Take(ctx); !errors.Is(err, maintenance.ErrNotMyTurn) {
		t.Fatalf("b took a live lease of a's: %v", err)
	}
	if err := a.Renew(ctx, recA, func(d *doc) { d.Cursor = "k1" }); err != nil {
		t.Fatalf("a's renewal: %v", err)
	}
	clk.Advance(2 * time.Minute) // a's lease lapses
	if err := a.Renewed(ctx, recA); !errors.Is(err, lifecycle.ErrLeaseLost) {
		t.Fatalf("a renewed a lapsed lease: %v", err)
	}
	recB, _, got, err := b.Take(ctx)
	if err != nil || got.Lease.Epoch != 2 || got.Cursor != "k1" {
		t.Fatalf("b's take of the lapsed lease: %+v, %v; want epoch 2, a's cursor", got, err)
	}
	if err := a.Renew(ctx, recA, func(d *doc) { d.Cursor = "a-late" }); !errors.Is(err, lifecycle.ErrLeaseLost) {
		t.Fatalf("a wrote after b took the turn: %v", err)
	}
	next := clk.Now().Add(time.Hour)
	if err := b.Release(ctx, recB, func(d *doc) { d.Next, d.Cursor = next, "" }); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := a.Take(ctx); !errors.Is(err, maintenance.ErrNotMyTurn) {
		t.Fatalf("a took a turn not due: %v", err)
	}
	clk.Advance(time.Hour)
	if _, _, got, err := a.Take(ctx); err != nil || got.Lease.Epoch != 3 || got.Lease.Owner != "a" {
		t.Fatalf("a's take once due: %+v, %v; want epoch 3", got.Lease, err)
	}

	if _, err := s.Put(ctx, "m/turn.json", []byte("{junk"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, _, got, err := b.Take(ctx); err != nil || got.Lease.Owner != "b" || got.Lease.Epoch != 1 {
		t.Fatalf("take over a junk record: %+v, %v; want it made anew", got.Lease, err)
	}
}

// counter is a service counting its passes, failing each when fail is set.
type counter struct {
	maintenance.Base
	n    atomic.Int32
	fail bool
}

func (c *counter) RunOnce(context.Context) error {
	c.n.Add(1)
	if c.fail {
		return errors.New("store down")
	}
	return nil
}

// TestRun: Run makes a pass at once (or a period in, with Delay) and one
// every period, logging a failed one as {name}_failed.
func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		delay bool
		fail  bool
		// want: passes after 0, 1 and 3 periods.
		want [3]int32
	}{
		{"at once", false, false, [3]int32{1, 2, 4}},
		{"delayed", true, false, [3]int32{0, 1, 3}},
		{"failing", false, true, [3]int32{1, 2, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			var logs testlog.Buffer
			svc := &counter{fail: tt.fail, Base: maintenance.Base{Name: "count", Clock: clk, Period: time.Minute,
				Delay: tt.delay, Logger: slog.New(slog.NewTextHandler(&logs, nil))}}
			stop := maintenance.Start(ctx, svc)
			defer stop()
			for i, periods := range []int{0, 1, 3} {
				for clk.Now().Before(t0.Add(time.Duration(periods) * time.Minute)) {
					if _, _, err := clk.AdvanceToNext(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if err := clk.WaitIdle(ctx); err != nil {
					t.Fatal(err)
				}
				if got := svc.n.Load(); got != tt.want[i] {
					t.Fatalf("after %d periods: %d passes, want %d", periods, got, tt.want[i])
				}
			}
			if n := logs.Count("msg=count_failed"); (n > 0) != tt.fail {
				t.Fatalf("%d lines count_failed, failing %v:\n%s", n, tt.fail, logs.String())
			}

		})
	}
}

// TestTicker: a Ticker makes a pass once a period has passed since the
// last (the first at the first tick, or a period later with Delay), and
// one when the clock went back.
func TestTicker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		delay bool
		ticks []time.Duration // since t0
		want  int32
	}{
		{"at once", false, []time.Duration{0, 30 * time.Second, time.Minute, 90 * time.Second}, 2},
		{"delayed", true, []time.Duration{0, 30 * time.Second, time.Minute, 90 * time.Second, 2 * time.Minute}, 2},
		{"clock back", true, []time.Duration{0, time.Minute, 30 * time.Second}, 2},
		{"never due", true, []time.Duration{0, 59 * time.Second}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := &counter{Base: maintenance.Base{Name: "tick", Period: time.Minute, Delay: tt.delay}}
			tk := &maintenance.Ticker{Service: svc}
			for _, d := range tt.ticks {
				tk.Tick(context.Background(), t0.Add(d))
			}
			if got := svc.n.Load(); got != tt.want {
				t.Fatalf("%d passes, want %d", got, tt.want)
			}
		})
	}
}

// TestTurnNotDueCostsOneRead: a process asking for a turn another holds
// reads the record once and writes nothing (a create-first turn wrote a
// refused create-only Put at every ask).
func TestTurnNotDueCostsOneRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counting := &teststores.Counting{Store: memstore.NewDriver()}
	s := storage.New(counting)
	clk := clock.NewFake(t0)
	if _, _, _, err := turn(s, clk, "a").Take(ctx); err != nil {
		t.Fatal(err)
	}
	counting.Reset()
	if _, _, _, err := turn(s, clk, "b").Take(ctx); !errors.Is(err, maintenance.ErrNotMyTurn) {
		t.Fatalf("b took a live lease of a's: %v", err)
	}
	if g, p := counting.Gets.Load(), counting.Puts.Load(); g != 1 || p != 0 {
		t.Fatalf("a turn not due cost %d reads and %d writes, want 1 and 0", g, p)
	}
}
