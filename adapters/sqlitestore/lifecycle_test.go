package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// TestWatchPollerEnds: the poller that notices other processes' commits
// runs while a watch is open and ends with the last one (goleak finds
// it otherwise); a later Watch starts it again and still hears another
// handle's writes. Not parallel: goleak compares against the goroutines
// before the first Watch.
func TestWatchPollerEnds(t *testing.T) {
	ctx := t.Context()
	a, b, _ := openTwo(t, sqlitestore.Config{})
	// Both write once first, so their write connections are open.
	for _, s := range []*storage.Store{a, b} {
		if _, err := s.Put(ctx, "warm", nil, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	before := goleak.IgnoreCurrent()
	for round := range 2 {
		c1, cancel1 := context.WithCancel(ctx)
		c2, cancel2 := context.WithCancel(ctx)
		w1, err := a.Watch(c1, "p/")
		if err != nil {
			t.Fatal(err)
		}
		w2, err := a.Watch(c2, "p/")
		if err != nil {
			t.Fatal(err)
		}
		cancel1()
		wantClosedWithin(t, w1)
		// One watch is still open: the poller serves it.
		if _, err := b.Put(ctx, "p/"+string(rune('a'+round)), nil, storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w2:
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: another handle's write not signalled with one watch left", round)
		}
		cancel2()
		wantClosedWithin(t, w2)
		if err := goleak.Find(before); err != nil {
			t.Fatalf("round %d: a goroutine outlived the last watch: %v", round, err)
		}
	}
}

// TestCloseEndsWatches: Close closes the channels of the watches still
// open (their watchers stop waiting, as at their contexts' end) and stops
// the poller; a watch whose context ends afterwards is harmless.
func TestCloseEndsWatches(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "store.db")})
	if err != nil {
		t.Fatal(err)
	}
	var chans []<-chan struct{}
	for _, prefix := range []string{"a/", "b/"} {
		ch, err := s.Watch(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range chans {
		wantClosedWithin(t, ch)
	}
	cancel() // the contexts' end after Close closes nothing twice
}

// TestReopenHonoursContext: a write whose context has ended, arriving when
// the write connection must be reopened (after a failed commit), writes
// nothing and says why, rather than opening and committing regardless.
func TestReopenHonoursContext(t *testing.T) {
	t.Parallel()
	d := newDriver(t)
	ctx := t.Context()
	fail := true
	sqlitestore.SetBeforeCommit(d, func(c *sql.Conn) {
		if fail {
			fail = false
			_ = c.Close()
		}
	})
	if _, err := d.Put(ctx, "k", []byte("1"), driver.Condition{}); !errors.Is(err, storage.ErrOutcomeUnknown) {
		t.Fatalf("Put over a failed commit: %v, want outcome unknown", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	// The driver itself: the portable Store refuses a done context first.
	if _, err := d.Put(done, "late", []byte("x"), driver.Condition{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a done context on a reopen: %v, want context.Canceled", err)
	}
	if _, _, err := d.Get(ctx, "late"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the write whose context had ended: Get %v, want not found", err)
	}
	if _, err := d.Put(ctx, "k", []byte("2"), driver.Condition{}); err != nil {
		t.Fatalf("the next write: %v", err)
	}
}

// wantClosedWithin waits up to 5 s for ch to close, draining signals.
func wantClosedWithin(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the watch channel was not closed within 5 s")
		}
	}
}
