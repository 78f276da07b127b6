package sqlitestore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/internal/origin"
	"github.com/runconveyor/conveyor/storage"
)

// TestWatchOrigin: a watch marked with an origin is not woken by this
// Store's writes of that origin (Put, Delete, Commit; the poller skips
// them as its own), and is woken by a write of another origin or none
// sharing their group commit, and by another handle's write of the same
// origin (which the writing handle cannot tell apart).
func TestWatchOrigin(t *testing.T) {
	ctx := t.Context()
	a, b, _ := openTwo(t, sqlitestore.Config{WatchInterval: 2 * time.Millisecond})
	mine, theirs := origin.New(), origin.New()
	wctx, cancel := context.WithCancel(origin.With(ctx, mine))
	defer cancel()
	ch, err := a.Watch(wctx, "q/")
	if err != nil {
		t.Fatal(err)
	}
	own := origin.With(ctx, mine)
	quiet := func(what string) {
		t.Helper()
		select {
		case <-ch:
			t.Fatalf("%s signalled the watch of its own origin", what)
		case <-time.After(50 * time.Millisecond): // 25 poll intervals
		}
	}
	want := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: no signal", what)
		}
	}
	v, err := a.Put(own, "q/1", []byte("1"), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	quiet("a Put")
	if err := a.Delete(own, "q/1", storage.IfMatch(v)); err != nil {
		t.Fatal(err)
	}
	quiet("a Delete")
	if _, err := a.Commit(own, []storage.Write{{Key: "q/2", Value: []byte("2")}, {Key: "x/2", Value: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	quiet("a Commit")

	for i, ctx := range []context.Context{ctx, origin.With(ctx, theirs)} {
		// Concurrent writers share commits: the other's key must wake
		// the watch whatever own writes it shares one with.
		var wg sync.WaitGroup
		for j := range 8 {
			wg.Go(func() {
				wctx := own
				if j == 7 {
					wctx = ctx
				}
				if _, err := a.Put(wctx, fmt.Sprintf("q/%d-%d", i, j), nil, storage.Condition{}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		want(fmt.Sprintf("writer %d among own writes", i))
	}
	if _, err := b.Put(own, "q/b", nil, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	want("another handle's write of the same origin")
}
