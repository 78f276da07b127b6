package inbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// TestExpiredKeptCostsNothing: the expiry pass and the list of live
// entries step over the expired entries kept (inbox/expired/) instead of
// listing them: with 300 expired, they list the 2 live entries' keys
// only, one whose id sorts before "expired" and one after.
func TestExpiredKeptCostsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counting := &teststores.Counting{Store: memstore.NewDriver()}
	clk := clock.NewFake(t0)
	b := newBox(t, storage.New(counting), clk)
	for i := range 300 {
		if _, err := b.Submit(ctx, lifecycle.ActorGateway, sub(fmt.Sprintf("inbox_old%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(73 * time.Hour)
	if moved, err := b.ExpireDue(ctx, lifecycle.ActorSystem); err != nil || len(moved) != 300 {
		t.Fatalf("expiry %d %v", len(moved), err)
	}
	for _, id := range []string{"aa_live", "zz_live"} {
		if _, err := b.Submit(ctx, lifecycle.ActorGateway, sub(id)); err != nil {
			t.Fatal(err)
		}
	}
	counting.Reset()
	if l := list(t, b, inbox.ListOptions{}); fmt.Sprint(l) != "[aa_live:pending zz_live:pending]" {
		t.Fatalf("live list %v", l)
	}
	if moved, err := b.ExpireDue(ctx, lifecycle.ActorSystem); err != nil || len(moved) != 0 {
		t.Fatalf("expiry %v %v", moved, err)
	}
	// Each walk lists the live keys and at most one expired key (the
	// first, where it jumps).
	if n := counting.Listed.Load(); n > 2*3 {
		t.Fatalf("the list and the expiry pass listed %d keys beside 300 expired entries, want at most 6", n)
	}
	if l := list(t, b, inbox.ListOptions{IncludeExpired: true}); len(l) != 302 {
		t.Fatalf("with expired: %d entries, want 302", len(l))
	}
}
