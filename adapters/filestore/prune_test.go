//go:build unix

package filestore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/runconveyor/conveyor/storage"
)

// files lists every file and directory under root, lock file aside.
func files(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(root, p); rel != "." && rel != ".cnvlocks" {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDeleteLeavesNothing: a deleted key leaves no lock file and no empty
// directory (issue 20: a month of history left 9,999 empty lock files),
// while a directory that still holds a key stays. Before the change, the
// deleted keys' directories were left behind.
func TestDeleteLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"agents/a/runs/r1/status.json", "agents/a/runs/r1/steps/01-x.json", "queue/lanes/a/0001-j1", "agents/a/runs/r2/status.json"}
	for _, k := range keys {
		if _, err := s.Put(ctx, k, []byte("{}"), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys[:3] {
		if err := s.Delete(ctx, k, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	// A missing key's delete leaves nothing either.
	if err := s.Delete(ctx, "nope/a/b.json", storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(files(t, dir), " ")
	want := strings.Join([]string{"agents", "agents/a", "agents/a/runs", "agents/a/runs/r2", "agents/a/runs/r2/status.json"}, " ")
	if got != want {
		t.Errorf("left after the deletes:\n%s\nwant\n%s", got, want)
	}
	if err := s.Delete(ctx, keys[3], storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if left := files(t, dir); len(left) != 0 {
		t.Errorf("left after every key was deleted: %v", left)
	}
}

// TestPruneRacesPut: writers put and delete keys of one directory while
// others do the same in it, through two Stores on one root (two
// processes): a deletion that empties the directory removes it, and a
// write into it at that moment makes it again; no write fails and none
// is lost. With a single retry of the directory (the old createTemp),
// writes fail with "no such file or directory".
func TestPruneRacesPut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	var stores []*fsStore
	for range 2 {
		s, err := openStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	const writers, rounds = 4, 150
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%2]
			for i := range rounds {
				key := fmt.Sprintf("d/e/f/w%d-%d.json", w, i%3)
				v, err := s.Put(ctx, key, []byte("x"), storage.Condition{})
				if err != nil {
					errs <- fmt.Errorf("put %s: %w", key, err)
					return
				}
				if _, got, err := s.Get(ctx, key); err != nil || got != v {
					errs <- fmt.Errorf("get %s after its put: %v, %v", key, got, err)
					return
				}
				if err := s.Delete(ctx, key, storage.IfMatch(v)); err != nil {
					errs <- fmt.Errorf("delete %s: %w", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if left := files(t, dir); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		t.Error("the root was removed")
	}
}

// TestDeleteRemovesOldLockFiles: a root written by a version from before
// .cnvlocks holds a lock file beside each key; deleting the key removes
// it, and so its directory.
func TestDeleteRemovesOldLockFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "queue/lanes/a/0001-j1", []byte("{}"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "queue/lanes/a/.cnvlock-0001-j1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "queue/lanes/a/0001-j1", storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if left := files(t, dir); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
}

// TestListRemovesEmptyDirectories: an empty directory, as a process killed
// between a deletion's unlink and its prune leaves, is removed by the next
// listing that meets it, with its parents while they are empty; a
// directory holding a key, or a write's temporary file, stays. Before, it
// stayed for ever: no key names it, and only a deletion pruned.
func TestListRemovesEmptyDirectories(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "agents/a/runs/r2/status.json", []byte("{}"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"agents/a/runs/r1/steps", "agents/a/runs/r1/output", "agents/b/runs/r3", "agents/a/runs/r4"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A write in progress: its temporary file keeps its directory.
	if err := os.WriteFile(filepath.Join(dir, "agents/a/runs/r4/.cnvtmp-x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k, err := range s.List(ctx, "agents/") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if len(keys) != 1 || keys[0] != "agents/a/runs/r2/status.json" {
		t.Errorf("listed %v", keys)
	}
	got := strings.Join(files(t, dir), " ")
	want := "agents agents/a agents/a/runs agents/a/runs/r2 agents/a/runs/r2/status.json agents/a/runs/r4 agents/a/runs/r4/.cnvtmp-x"
	if got != want {
		t.Errorf("left after the listing:\n%s\nwant\n%s", got, want)
	}
}
