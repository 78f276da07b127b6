package storage_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// The portable layer's own suite: what storage.New adds over any driver,
// checked once here against a driver that records its calls and answers
// what a test tells it to. (What a driver must do is storetest's.)

// fake is a driver that records each call and answers err (and keys, for
// ListAfter).
type fake struct {
	mu    sync.Mutex
	calls []string
	err   error
	keys  []string
}

func (f *fake) record(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	return f.err
}

func (f *fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fake) Get(_ context.Context, key string) ([]byte, driver.Version, error) {
	if err := f.record("get " + key); err != nil {
		return nil, "", err
	}
	return []byte("v"), "v1", nil
}

func (f *fake) Put(_ context.Context, key string, _ []byte, cond driver.Condition) (driver.Version, error) {
	if err := f.record("put " + key + " " + cond.String()); err != nil {
		return "", err
	}
	return "v2", nil
}

func (f *fake) Delete(_ context.Context, key string, cond driver.Condition) error {
	return f.record("delete " + key + " " + cond.String())
}

func (f *fake) ListAfter(_ context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := f.record("list " + prefix + " after " + after); err != nil {
			yield("", err)
			return
		}
		for _, k := range f.keys {
			if !yield(k, nil) {
				return
			}
		}
	}
}

func collect(seq iter.Seq2[string, error]) ([]string, error) {
	var keys []string
	for k, err := range seq {
		if err != nil {
			return keys, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// TestStoreChecksBeforeItsDriver: what breaks the contract's rules is
// refused with the contract's error, and the driver is never asked.
func TestStoreChecksBeforeItsDriver(t *testing.T) {
	t.Parallel()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	tests := []struct {
		name string
		call func(*storage.Store) error
		want error
	}{
		{"get, invalid key", func(s *storage.Store) error { _, _, err := s.Get(ctx, "../x"); return err }, storage.ErrInvalidKey},
		{"get, done context", func(s *storage.Store) error { _, _, err := s.Get(done, "k"); return err }, context.Canceled},
		{"put, invalid key", func(s *storage.Store) error { _, err := s.Put(ctx, "a//b", nil, storage.Condition{}); return err }, storage.ErrInvalidKey},
		{"put, if-match without a version", func(s *storage.Store) error {
			_, err := s.Put(ctx, "k", nil, storage.IfMatch(""))
			return err
		}, storage.ErrInvalidCondition},
		{"put, done context", func(s *storage.Store) error { _, err := s.Put(done, "k", nil, storage.IfNotExists()); return err }, context.Canceled},
		{"delete, if-not-exists", func(s *storage.Store) error { return s.Delete(ctx, "k", storage.IfNotExists()) }, storage.ErrInvalidCondition},
		{"delete, invalid key", func(s *storage.Store) error { return s.Delete(ctx, "", storage.Condition{}) }, storage.ErrInvalidKey},
		{"delete, done context", func(s *storage.Store) error { return s.Delete(done, "k", storage.Condition{}) }, context.Canceled},
		{"list, invalid prefix", func(s *storage.Store) error { _, err := collect(s.List(ctx, "a/../")); return err }, storage.ErrInvalidKey},
		{"list after, invalid cursor", func(s *storage.Store) error { _, err := collect(s.ListAfter(ctx, "a/", "a/\x00")); return err }, storage.ErrInvalidKey},
		{"list, done context", func(s *storage.Store) error { _, err := collect(s.List(done, "a/")); return err }, context.Canceled},
		{"watch, invalid prefix", func(s *storage.Store) error { _, err := s.Watch(ctx, "/a"); return err }, storage.ErrInvalidKey},
		{"watch, done context", func(s *storage.Store) error { _, err := s.Watch(done, "a/"); return err }, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &fake{}
			err := tc.call(storage.New(d))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want one matching %v", err, tc.want)
			}
			if _, ok := errors.AsType[*storage.OpError](err); !ok {
				t.Errorf("err = %T, want an *OpError", err)
			}
			if calls := d.Calls(); len(calls) != 0 {
				t.Errorf("the driver was asked %q", calls)
			}
		})
	}
}

// TestStoreWrapsItsDriversErrors: whatever form a driver reports a failure
// in, the caller gets an *OpError naming the operation and key, matching
// the sentinel and keeping the native error reachable.
func TestStoreWrapsItsDriversErrors(t *testing.T) {
	t.Parallel()
	native := &fs.PathError{Op: "open", Path: "/x", Err: syscall.EIO}
	own := &driver.OpError{Op: "get", Key: "k", Kind: storage.ErrNotFound, Cause: native}
	tests := []struct {
		name      string
		err       error
		kind      error // the *OpError's Kind
		cause     error // reachable with errors.Is, or nil
		transient bool
		msg       string
	}{
		{"bare sentinel", storage.ErrNotFound, storage.ErrNotFound, nil, false, "storage: get k: not found"},
		{"bare context error", context.DeadlineExceeded, context.DeadlineExceeded, nil, false, "storage: get k: context deadline exceeded"},
		{"native error as the cause", &driver.OpError{Op: "get", Key: "k", Cause: native}, nil, syscall.EIO, true, "storage: get k: open /x: input/output error"},
		{"bare error: final", native, native, syscall.EIO, false, "storage: get k: open /x: input/output error"},
		{"wrapped sentinel", fmt.Errorf("gone: %w", storage.ErrNotFound), storage.ErrNotFound, nil, false, "storage: get k: not found: gone: storage: not found"},
		{"the driver's own OpError", own, storage.ErrNotFound, syscall.EIO, false, own.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := storage.New(&fake{err: tc.err}).Get(context.Background(), "k")
			oe, ok := errors.AsType[*storage.OpError](err)
			if !ok {
				t.Fatalf("err = %T %v, want an *OpError", err, err)
			}
			if oe.Op != "get" || oe.Key != "k" || oe.Kind != tc.kind {
				t.Errorf("OpError = %+v, want op get, key k, kind %v", oe, tc.kind)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Errorf("%v does not reach %v", err, tc.cause)
			}
			if got := storage.Transient(err); got != tc.transient {
				t.Errorf("Transient = %v, want %v", got, tc.transient)
			}
			if err.Error() != tc.msg {
				t.Errorf("Error() = %q, want %q", err.Error(), tc.msg)
			}
		})
	}
	// Every operation names itself.
	d := &fake{err: syscall.EIO}
	s := storage.New(d)
	ctx := context.Background()
	_, perr := s.Put(ctx, "p", nil, storage.Condition{})
	derr := s.Delete(ctx, "d", storage.Condition{})
	_, lerr := collect(s.List(ctx, "l/"))
	for _, c := range []struct {
		err     error
		op, key string
	}{{perr, "put", "p"}, {derr, "delete", "d"}, {lerr, "list", "l/"}} {
		if oe, ok := errors.AsType[*storage.OpError](c.err); !ok || oe.Op != c.op || oe.Key != c.key || !errors.Is(c.err, syscall.EIO) {
			t.Errorf("%s: err = %v, want an *OpError of %s %s", c.op, c.err, c.op, c.key)
		}
	}
}

// TestStoreListsThroughListAfter: List is ListAfter from the start, and a
// cursor is reduced before the driver sees it (ListStart).
func TestStoreListsThroughListAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name      string
		list      func(*storage.Store) iter.Seq2[string, error]
		wantCalls []string
		wantKeys  []string
	}{
		{"list", func(s *storage.Store) iter.Seq2[string, error] { return s.List(ctx, "a/") },
			[]string{"list a/ after "}, []string{"a/1", "a/2"}},
		{"cursor before the prefix", func(s *storage.Store) iter.Seq2[string, error] { return s.ListAfter(ctx, "b/", "a/9") },
			[]string{"list b/ after "}, []string{"a/1", "a/2"}},
		{"cursor inside the prefix", func(s *storage.Store) iter.Seq2[string, error] { return s.ListAfter(ctx, "a/", "a/1") },
			[]string{"list a/ after a/1"}, []string{"a/1", "a/2"}},
		{"cursor past the prefix", func(s *storage.Store) iter.Seq2[string, error] { return s.ListAfter(ctx, "a/", "b") },
			nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &fake{keys: []string{"a/1", "a/2"}}
			keys, err := collect(tc.list(storage.New(d)))
			if err != nil {
				t.Fatal(err)
			}
			// The fake yields its keys whatever it is asked: the Store passes
			// on what its driver yields.
			if !slices.Equal(keys, tc.wantKeys) || !slices.Equal(d.Calls(), tc.wantCalls) {
				t.Errorf("keys %q, calls %q; want %q, %q", keys, d.Calls(), tc.wantKeys, tc.wantCalls)
			}
		})
	}
	// A consumer that stops early stops the driver's listing too.
	d := &fake{keys: []string{"a/1", "a/2", "a/3"}}
	n := 0
	for range storage.New(d).List(ctx, "a/") {
		n++
		break
	}
	if n != 1 {
		t.Errorf("the listing went on after its consumer stopped: %d keys", n)
	}
}

type watchingFake struct {
	fake
	ch chan struct{}
}

func (w *watchingFake) Watch(context.Context, string) (<-chan struct{}, error) { return w.ch, nil }

// TestStoreWatchFallsBackToPolling: a driver without Watch gives an error
// matching errors.ErrUnsupported (the caller polls); one with Watch gives
// its channel.
func TestStoreWatchFallsBackToPolling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := storage.New(&fake{}).Watch(ctx, "a/"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Watch on a driver that cannot watch: %v, want errors.ErrUnsupported", err)
	}
	w := &watchingFake{ch: make(chan struct{}, 1)}
	ch, err := storage.New(w).Watch(ctx, "a/")
	if err != nil || ch != (<-chan struct{})(w.ch) {
		t.Errorf("Watch on a watching driver: %v, %v; want its channel", ch, err)
	}
	// A Store used as a driver watches as it does.
	if _, err := storage.New(storage.New(w)).Watch(ctx, "a/"); err != nil {
		t.Errorf("Watch through a Store used as a driver: %v", err)
	}
}

type settler struct {
	fake
	d time.Duration
}

func (s *settler) Settle() time.Duration { return s.d }

type wrapper struct{ driver.Store }

func (w wrapper) Unwrap() driver.Store { return w.Store }

type nonAtomic struct{ fake }

func (*nonAtomic) AtomicConditionalDelete() bool { return false }

type closer struct {
	fake
	closed bool
}

func (c *closer) Close() error { c.closed = true; return nil }

// TestStoreFindsCapabilitiesThroughWrappers: settle time and delete
// atomicity are the first ones declared down the wrappers' chain; Close
// reaches the driver.
func TestStoreFindsCapabilitiesThroughWrappers(t *testing.T) {
	t.Parallel()
	plain := storage.New(&fake{})
	if plain.SettleTime() != 0 || !plain.AtomicConditionalDelete() || plain.Close() != nil {
		t.Errorf("a plain driver: settle %v, atomic delete %v; want 0, true", plain.SettleTime(), plain.AtomicConditionalDelete())
	}
	deep := storage.New(wrapper{storage.New(wrapper{&settler{d: 7 * time.Second}})})
	if got := deep.SettleTime(); got != 7*time.Second {
		t.Errorf("SettleTime through two wrappers and a Store = %v, want 7s", got)
	}
	if storage.New(wrapper{&nonAtomic{}}).AtomicConditionalDelete() {
		t.Error("a non-atomic conditional Delete behind a wrapper reads as atomic")
	}
	c := &closer{}
	if err := storage.New(c).Close(); err != nil || !c.closed {
		t.Errorf("Close did not reach the driver: %v, %v", err, c.closed)
	}
	if (*storage.Store)(nil).SettleTime() != 0 {
		t.Error("SettleTime(nil) != 0")
	}
	// Commit is the Store's only where every driver down the chain
	// commits: a Store over a Store over a driver that cannot is a
	// Committer by its methods, and cannot.
	for _, tc := range []struct {
		name  string
		store *storage.Store
		want  bool
	}{
		{"memstore", memstore.New(), true},
		{"a Store over a memstore Store", storage.New(memstore.New()), true},
		{"a Store over a Store that cannot commit", storage.New(storage.New(&fake{})), false},
		{"a wrapper without Commit over memstore", storage.New(wrapper{memstore.New()}), false},
	} {
		if got := tc.store.CanCommit(); got != tc.want {
			t.Errorf("%s: CanCommit = %v, want %v", tc.name, got, tc.want)
		}
		if _, err := tc.store.Commit(t.Context(), []storage.Write{{Key: "k"}}); !tc.want && !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: Commit = %v, want ErrUnsupported", tc.name, err)
		}
	}
}
