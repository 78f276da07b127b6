package main

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/storage"
)

// TestOutageStoreCommits: the outage wrapper commits what the store under
// it commits, and refuses a commit whole while the marker exists.
func TestOutageStoreCommits(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "outage")
	fs, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if storage.New(&outageStore{Store: fs, marker: marker}).CanCommit() {
		t.Error("the outage wrapper over filestore can commit")
	}
	s := storage.New(&outageStore{Store: memstore.New(), marker: marker})
	if !s.CanCommit() {
		t.Fatal("the outage wrapper over memstore cannot commit")
	}
	w := []storage.Write{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("1")}}
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(t.Context(), w); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a commit during the outage: %v, want EIO", err)
	}
	if _, _, err := s.Get(t.Context(), "a"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a read during the outage: %v", err)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(t.Context(), "a"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the refused commit wrote a: %v", err)
	}
	if _, err := s.Commit(t.Context(), w); err != nil {
		t.Fatal(err)
	}
}
