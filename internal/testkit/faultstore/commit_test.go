package faultstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

// TestSuiteThroughTheWrappers: a fault store and a count, idle, are the
// store they wrap, Commit included.
func TestSuiteThroughTheWrappers(t *testing.T) {
	t.Run("faultstore", func(t *testing.T) {
		storetest.TestDriver(t, func(*testing.T) driver.Store { return faultstore.New(memstore.New()) }, storetest.Capabilities{})
	})
	t.Run("counting", func(t *testing.T) {
		storetest.TestDriver(t, func(*testing.T) driver.Store { return &teststores.Counting{Store: memstore.NewDriver()} }, storetest.Capabilities{})
	})
}

// noCommit is a driver that cannot commit.
type noCommit struct{ driver.Store }

func TestWrappersCommitOnlyWhatTheyWrap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store driver.Store
		want  bool
	}{
		{"faultstore over memstore", faultstore.New(memstore.New()), true},
		{"faultstore over no commit", faultstore.New(noCommit{memstore.NewDriver()}), false},
		{"counting over memstore", &teststores.Counting{Store: memstore.New()}, true},
		{"counting over no commit", &teststores.Counting{Store: noCommit{memstore.NewDriver()}}, false},
		{"faultstore over counting over no commit", faultstore.New(&teststores.Counting{Store: noCommit{memstore.NewDriver()}}), false},
	} {
		s := storage.New(tc.store)
		if got := s.CanCommit(); got != tc.want {
			t.Errorf("%s: CanCommit = %v, want %v", tc.name, got, tc.want)
		}
		_, err := s.Commit(t.Context(), []storage.Write{{Key: "k", Value: []byte("v")}})
		if tc.want != (err == nil) || !tc.want && !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: Commit = %v", tc.name, err)
		}
	}
}

// TestCommitFaultsKeepItWhole: a refused commit writes nothing, and a
// settling fault lands a commit whole.
func TestCommitFaultsKeepItWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	count := &teststores.Counting{Store: memstore.New()}
	fs := faultstore.New(count)
	s := storage.New(fs)
	v, err := s.Put(ctx, "a", []byte("a1"), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	writes := []storage.Write{
		{Key: "a", Value: []byte("a2"), Cond: storage.IfMatch(v)},
		{Key: "b", Value: []byte("b1"), Cond: storage.IfNotExists()},
		{Key: "c", Delete: true},
	}
	count.Reset()
	fs.FailNext(1)
	if _, err := s.Commit(ctx, writes); !storage.Transient(err) {
		t.Fatalf("a refused commit: %v, want a transient failure", err)
	}
	if b, _, _ := s.Get(ctx, "a"); string(b) != "a1" {
		t.Fatalf("a refused commit wrote a: %q", b)
	}
	if _, _, err := s.Get(ctx, "b"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a refused commit wrote b: %v", err)
	}
	if count.Commits.Load() != 0 {
		t.Fatalf("a refused commit reached the store (%d commits)", count.Commits.Load())
	}
	vs, err := s.Commit(ctx, writes)
	if err != nil || len(vs) != 3 {
		t.Fatalf("commit: %q, %v", vs, err)
	}
	if count.Commits.Load() != 1 || count.Puts.Load() != 2 || count.Deletes.Load() != 1 {
		t.Fatalf("counted %d commits, %d puts, %d deletes; want 1, 2, 1", count.Commits.Load(), count.Puts.Load(), count.Deletes.Load())
	}
	// A create over b, and over a missing d: the settling fault lets the
	// create of b land, and d with it.
	fs.AcceptCreateOver(1)
	if _, err := s.Commit(ctx, []storage.Write{
		{Key: "d", Value: []byte("d1"), Cond: storage.IfNotExists()},
		{Key: "b", Value: []byte("b2"), Cond: storage.IfNotExists()},
	}); err != nil {
		t.Fatalf("a create over an existing key under a settling fault: %v", err)
	}
	for k, want := range map[string]string{"b": "b2", "d": "d1"} {
		if b, _, _ := s.Get(ctx, k); string(b) != want {
			t.Errorf("%s = %q, want %q", k, b, want)
		}
	}
	if fs.Faults().DoubleCreates != 1 {
		t.Errorf("DoubleCreates = %d, want 1", fs.Faults().DoubleCreates)
	}
	// Without the fault the same create is refused, naming b.
	_, err = s.Commit(ctx, []storage.Write{
		{Key: "e", Value: []byte("e1"), Cond: storage.IfNotExists()},
		{Key: "b", Value: []byte("b3"), Cond: storage.IfNotExists()},
	})
	var oe *storage.OpError
	if !errors.Is(err, storage.ErrPreconditionFailed) || !errors.As(err, &oe) || oe.Key != "b" {
		t.Fatalf("a create over b: %v, want a failed condition naming b", err)
	}
	if _, _, err := s.Get(ctx, "e"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a refused commit wrote e: %v", err)
	}
}
