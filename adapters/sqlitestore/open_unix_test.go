//go:build unix

package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/storage"
)

// TestOpenBesideAWriter: opening a file whose schema exists takes no
// write lock, so a process starting while another holds the lock (a busy
// writer, one stopped mid-commit) opens at once rather than give up after
// BusyTimeout; a file a newer release wrote is refused by name.
func TestOpenBesideAWriter(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	ctx := t.Context()
	s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "k", []byte("v"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	release := holdLock(t, path)
	began := time.Now()
	s2, err := sqlitestore.New(ctx, sqlitestore.Config{Path: path, BusyTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("opening beside a held write lock: %v", err)
	}
	if took := time.Since(began); took >= 200*time.Millisecond {
		t.Errorf("opening beside a held write lock took %v, the whole BusyTimeout", took)
	}
	if got, _, err := s2.Get(ctx, "k"); err != nil || string(got) != "v" {
		t.Errorf("read beside a held write lock: %q %v", got, err)
	}
	_ = s2.Close()
	release()

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), "UPDATE meta SET value = 99 WHERE name = 'schema'"); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlitestore.New(ctx, sqlitestore.Config{Path: path}); err == nil || !strings.Contains(err.Error(), "schema version 99") {
		t.Errorf("opening a newer release's file: %v, want its schema version refused", err)
	}
}
