//go:build unix

package probe_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/internal/probe"
)

// TestRunWaitsOutABusySQLite: on a SQLite file whose write lock another
// process holds past the store's BusyTimeout, each write gives up with a
// busy error that wrote nothing; the probe retries those within its own
// Timeout and passes once the lock is free, rather than refusing the start
// (Workers starting together beside a disk-heavy process met this).
func TestRunWaitsOutABusySQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := sqlitestore.New(t.Context(), sqlitestore.Config{Path: path, BusyTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The write lock, taken as another process takes it: a second open
	// file description of -lock, flocked.
	f, err := os.OpenFile(path+"-lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	const held = 600 * time.Millisecond
	released := make(chan struct{})
	time.AfterFunc(held, func() {
		_ = unix.Flock(fd, unix.LOCK_UN)
		close(released)
	})
	defer func() { <-released }() // before the file closes
	began := time.Now()
	if err := probe.Run(t.Context(), s, probe.Config{Timeout: 20 * time.Second}); err != nil {
		t.Fatalf("the probe on a file busy for %v (BusyTimeout 100ms): %v", held, err)
	}
	if took := time.Since(began); took < held {
		t.Errorf("the probe passed in %v, before the lock was released at %v: the lock was not held", took, held)
	}
}
