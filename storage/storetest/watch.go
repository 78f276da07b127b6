package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/origin"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// watchDeadline bounds how long the suite waits for a watcher's
// signal or close before it fails. It is generous, for loaded CI machines;
// adapters test their own promptness (filestore: another process's write
// wakes a watcher within 100 ms).
const watchDeadline = 5 * time.Second

// testWatch checks the watch contract on drivers that implement
// driver.Watcher, and skips on those that do not (or cannot watch on this
// platform). The watches are the Store's, as callers make them.
func testWatch(t *testing.T, s *storage.Store) {
	if _, ok := s.Unwrap().(driver.Watcher); !ok {
		t.Skipf("%T does not implement driver.Watcher", s.Unwrap())
	}
	w := s
	ctx, cancel := context.WithCancel(ctxT(t))
	probe, err := w.Watch(ctx, "probe/")
	if errors.Is(err, errors.ErrUnsupported) {
		cancel()
		t.Skipf("%T cannot watch here: %v", s.Unwrap(), err)
	}
	if err != nil {
		cancel()
		t.Fatalf("Watch: %v", err)
	}
	cancel()
	wantClosed(t, probe)

	for _, sub := range []struct {
		name string
		test func(*testing.T, *storage.Store, watcher)
	}{
		{"PutAndDeleteSignal", watchPutAndDeleteSignal},
		{"NoSignalMissed", watchNoSignalMissed},
		{"NewNestedKeys", watchNewNestedKeys},
		{"PrefixIsAStringPrefix", watchPrefixIsAStringPrefix},
		{"EveryWatcherSignalled", watchEveryWatcherSignalled},
		{"NeverBlocksWriters", watchNeverBlocksWriters},
		{"CancelClosesChannel", watchCancelClosesChannel},
		{"InvalidPrefixAndDoneContext", watchInvalidPrefixAndDoneContext},
		{"OtherOriginsSignal", watchOtherOriginsSignal},
	} {
		t.Run(sub.name, func(t *testing.T) { sub.test(t, s, w) })
	}
}

func watchPutAndDeleteSignal(t *testing.T, s *storage.Store, w watcher) {
	ch := mustWatch(t, w, "wq/")
	v := mustPut(t, s, "wq/a.json", []byte("1"), storage.IfNotExists())
	wantSignal(t, ch, "create")
	v = mustPut(t, s, "wq/a.json", []byte("2"), storage.IfMatch(v))
	wantSignal(t, ch, "compare-and-swap")
	if err := s.Delete(ctxT(t), "wq/a.json", storage.IfMatch(v)); err != nil {
		t.Fatal(err)
	}
	wantSignal(t, ch, "delete")
}

func watchNoSignalMissed(t *testing.T, s *storage.Store, w watcher) {
	// One write, one receive, twenty times: a signal that coalesced
	// with an earlier one would leave a receive waiting.
	ch := mustWatch(t, w, "wm/")
	for i := range 20 {
		mustPut(t, s, fmt.Sprintf("wm/%02d", i), []byte("x"), storage.IfNotExists())
		wantSignal(t, ch, fmt.Sprintf("write %d", i))
	}
}

func watchNewNestedKeys(t *testing.T, s *storage.Store, w watcher) {
	// Keys in "directories" that did not exist when Watch began.
	ch := mustWatch(t, w, "wn/")
	mustPut(t, s, "wn/x/y/z.json", []byte("1"), storage.IfNotExists())
	wantSignal(t, ch, "first key three levels down")
	mustPut(t, s, "wn/x/y2/k", []byte("2"), storage.IfNotExists())
	wantSignal(t, ch, "key in a new sibling")
	deep := mustWatch(t, w, "wd/a/b/")
	mustPut(t, s, "wd/a/b/c/d", []byte("3"), storage.IfNotExists())
	wantSignal(t, deep, "key under a prefix none of whose parents existed")
}

func watchPrefixIsAStringPrefix(t *testing.T, s *storage.Store, w watcher) {
	ch := mustWatch(t, w, "wp/ab")
	mustPut(t, s, "wp/abc/x", []byte("1"), storage.IfNotExists())
	wantSignal(t, ch, "wp/abc/x under wp/ab")
	mustPut(t, s, "wp/ab", []byte("2"), storage.IfNotExists())
	wantSignal(t, ch, "the key equal to the prefix")
	all := mustWatch(t, w, "")
	mustPut(t, s, "we/k", []byte("3"), storage.IfNotExists())
	wantSignal(t, all, "any key under the empty prefix")
}

func watchEveryWatcherSignalled(t *testing.T, s *storage.Store, w watcher) {
	a, b, parent := mustWatch(t, w, "ww/q/"), mustWatch(t, w, "ww/q/"), mustWatch(t, w, "ww/")
	mustPut(t, s, "ww/q/1", []byte("1"), storage.IfNotExists())
	wantSignal(t, a, "first watcher")
	wantSignal(t, b, "second watcher of the same prefix")
	wantSignal(t, parent, "watcher of the parent prefix")
}

func watchNeverBlocksWriters(t *testing.T, s *storage.Store, w watcher) {
	// Nobody receives while 200 writes go through: each must return
	// (the context's deadline fails a blocked one), and a signal is
	// waiting afterwards.
	ch := mustWatch(t, w, "wb/")
	ctx, cancel := context.WithTimeout(ctxT(t), 10*watchDeadline)
	defer cancel()
	for i := range 200 {
		if _, err := s.Put(ctx, fmt.Sprintf("wb/%03d", i%20), []byte{byte(i)}, storage.Condition{}); err != nil {
			t.Fatalf("write %d with a watcher nobody reads: %v", i, err)
		}
	}
	wantSignal(t, ch, "after 200 unread writes")
}

// watchOtherOriginsSignal: a watch marked with a writer's origin (the
// job queue's, internal/origin) may leave out that writer's own writes,
// never another's: a write of another origin, or of none, signals it, as
// does a Commit of another origin, however the writes before it were
// marked.
func watchOtherOriginsSignal(t *testing.T, s *storage.Store, w watcher) {
	mine, theirs := origin.New(), origin.New()
	ctx, cancel := context.WithCancel(origin.With(context.Background(), mine))
	ch, err := w.Watch(ctx, "wo/")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		wantClosed(t, ch)
	})
	ownCtx, theirCtx := origin.With(ctxT(t), mine), origin.With(ctxT(t), theirs)
	put := func(ctx context.Context, key string) {
		t.Helper()
		if _, err := s.Put(ctx, key, []byte("x"), storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	put(ownCtx, "wo/own1")
	put(theirCtx, "wo/theirs")
	wantSignal(t, ch, "another origin's Put")
	put(ownCtx, "wo/own2")
	put(ctxT(t), "wo/unmarked")
	wantSignal(t, ch, "an unmarked Put")
	if err := s.Delete(theirCtx, "wo/own1", storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	wantSignal(t, ch, "another origin's Delete")
	if !s.CanCommit() {
		return
	}
	put(ownCtx, "wo/own3")
	if _, err := s.Commit(theirCtx, []storage.Write{{Key: "wo/c1", Value: []byte("1")}, {Key: "wo/c2", Value: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	wantSignal(t, ch, "another origin's Commit")
}

func watchCancelClosesChannel(t *testing.T, s *storage.Store, w watcher) {
	ctx, cancel := context.WithCancel(ctxT(t))
	ch, err := w.Watch(ctx, "wc/")
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "wc/before", []byte("1"), storage.IfNotExists())
	cancel()
	wantClosed(t, ch)
	mustPut(t, s, "wc/after", []byte("2"), storage.IfNotExists()) // no send on the closed channel
}

func watchInvalidPrefixAndDoneContext(t *testing.T, s *storage.Store, w watcher) {
	for _, bad := range []string{"/a", "a//", "../", "\xff"} {
		if _, err := w.Watch(ctxT(t), bad); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Watch(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
	done, cancel := context.WithCancel(ctxT(t))
	cancel()
	if _, err := w.Watch(done, "wx/"); !errors.Is(err, context.Canceled) {
		t.Errorf("Watch with a canceled context = %v, want context.Canceled", err)
	}
}

// mustWatch watches prefix until the test ends, and waits for the close
// then, so the watch is released before the test's leak checks.
func mustWatch(t *testing.T, w watcher, prefix string) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := w.Watch(ctx, prefix)
	if err != nil {
		cancel()
		t.Fatalf("Watch(%q): %v", prefix, err)
	}
	t.Cleanup(func() {
		cancel()
		wantClosed(t, ch)
	})
	return ch
}

// wantSignal waits, at most watchDeadline, for a signal on ch.
func wantSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	timer := time.NewTimer(watchDeadline)
	defer timer.Stop()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the watch channel closed instead of signalling", what)
		}
	case <-timer.C:
		t.Fatalf("%s: no signal within %v", what, watchDeadline)
	}
}

// wantClosed drains ch until it is closed, at most watchDeadline.
func wantClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	timer := time.NewTimer(watchDeadline)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("the watch channel was not closed within %v of its context's end", watchDeadline)
		}
	}
}

// watcher is the Store's Watch, as the subtests call it.
type watcher interface {
	Watch(ctx context.Context, prefix string) (<-chan struct{}, error)
}
