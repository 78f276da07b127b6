package harness

import (
	"context"
	"errors"
	"testing"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// TestCountingForwardsCapabilities: the counting wrapper offers Commit and
// Watch exactly when the store under it has them (the SDK finds both by a
// type assertion on its driver, so one hidden would measure another path),
// and counts each write of a commit as a write.
func TestCountingForwardsCapabilities(t *testing.T) {
	t.Parallel()
	fs, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	for _, tc := range []struct {
		name          string
		s             *storage.Store
		commit, watch bool
	}{
		{"memstore", memstore.New(), true, true},
		{"filestore", fs, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.s.CanCommit(); got != tc.commit {
				t.Fatalf("the store itself: CanCommit %v, want %v", got, tc.commit)
			}
			cs, w := wrapCounting(tc.s)
			_, commit := w.(driver.Committer)
			_, watch := w.(driver.Watcher)
			if commit != tc.commit || watch != tc.watch {
				t.Fatalf("wrapper: Committer %v Watcher %v, want %v %v", commit, watch, tc.commit, tc.watch)
			}
			if !tc.commit {
				return
			}
			ws := storage.New(w)
			if !ws.CanCommit() {
				t.Fatal("a Store over the wrapper cannot commit")
			}
			ctx := context.Background()
			v, err := ws.Put(ctx, "a", []byte("1"), storage.IfNotExists())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ws.Commit(ctx, []storage.Write{
				{Key: "a", Cond: storage.IfMatch(v), Delete: true},
				{Key: "b", Value: []byte("2"), Cond: storage.IfNotExists()},
				{Key: "c", Value: []byte("3"), Cond: storage.IfNotExists()},
			}); err != nil {
				t.Fatal(err)
			}
			if p, d, c := cs.puts.Load(), cs.deletes.Load(), cs.commits.Load(); p != 3 || d != 1 || c != 1 {
				t.Fatalf("counted %d puts, %d deletes, %d commits; want 3, 1, 1", p, d, c)
			}
			// A commit refused whole counts as refused, with its writes.
			if _, err := ws.Commit(ctx, []storage.Write{
				{Key: "d", Value: []byte("4"), Cond: storage.IfNotExists()},
				{Key: "b", Value: []byte("5"), Cond: storage.IfNotExists()},
			}); !errors.Is(err, storage.ErrPreconditionFailed) {
				t.Fatalf("a commit over an existing key: %v", err)
			}
			if r, rw := cs.refused.Load(), cs.refusedWrites.Load(); r != 1 || rw != 2 {
				t.Fatalf("counted %d refused commits of %d writes; want 1 of 2", r, rw)
			}
		})
	}
}
