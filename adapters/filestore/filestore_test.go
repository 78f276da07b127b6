//go:build unix

package filestore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

const (
	childEnv     = "CONVEYOR_FILESTORE_CHILD_DIR"
	lockChildEnv = "CONVEYOR_FILESTORE_LOCK_CHILD" // "<key> <dir>"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(childIncrement(dir))
	}
	if arg := os.Getenv(lockChildEnv); arg != "" {
		os.Exit(childHoldLock(arg))
	}
	if arg := os.Getenv(killChildEnv); arg != "" {
		os.Exit(killChild(arg))
	}
	if dir := os.Getenv(watchChildEnv); dir != "" {
		os.Exit(watchChild(dir))
	}
	if arg := os.Getenv(syscallChildEnv); arg != "" {
		os.Exit(syscallChild(arg))
	}
	goleak.VerifyTestMain(m)
}

func newStore(t *testing.T) *fsStore {
	t.Helper()
	s, err := openStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.TestDriver(t, func(t *testing.T) driver.Store { return newStore(t).d }, storetest.Capabilities{})
}

// TestSurvivesRestart: a second Store on the same directory (a restarted
// process) sees the data and versions of the first.
func TestSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s1, err := openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s1.Put(t.Context(), "agents/a/runs/r/status.json", []byte(`{"status":"running"}`), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	s2, err := openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, v2, err := s2.Get(t.Context(), "agents/a/runs/r/status.json")
	if err != nil || string(b) != `{"status":"running"}` || v2 != v {
		t.Fatalf("after reopen: %q %q %v, want the value at %q", b, v2, err, v)
	}
	if _, err := s2.Put(t.Context(), "agents/a/runs/r/status.json", []byte("x"), storage.IfMatch(v)); err != nil {
		t.Fatalf("CAS with the version from before the restart: %v", err)
	}
}

// TestIgnoresLeftovers: temp files of a crashed write and lock files are
// never keys.
func TestIgnoresLeftovers(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if _, err := s.Put(ctx, "k", []byte("v"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Root(), ".cnvtmp-crashed"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k, err := range s.List(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if len(keys) != 1 || keys[0] != "k" {
		t.Fatalf("List = %q, want [k]", keys)
	}
}

// TestNativeErrorReachable: the *fs.PathError behind ErrNotFound stays
// reachable with errors.As.
func TestNativeErrorReachable(t *testing.T) {
	s := newStore(t)
	_, _, err := s.Get(t.Context(), "missing")
	var pe *fs.PathError
	if !errors.Is(err, storage.ErrNotFound) || !errors.As(err, &pe) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound wrapping *fs.PathError", err)
	}
}

const (
	children          = 4
	incrementsPerProc = 50
)

// TestSharedAcrossProcesses re-runs this test binary as several child
// processes that increment one counter in one directory with
// compare-and-swap; no increment may be lost.
func TestSharedAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	s := newStore(t)
	if _, err := s.Put(t.Context(), "counter", []byte("0"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, children)
	for i := range cmds {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+s.Root())
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %d: %v", i, err)
		}
	}
	b, _, err := s.Get(t.Context(), "counter")
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(children * incrementsPerProc); string(b) != want {
		t.Fatalf("counter = %s after %d processes x %d increments, want %s", b, children, incrementsPerProc, want)
	}
}

// childIncrement is the body of one child process.
func childIncrement(dir string) int {
	s, err := openStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	for done := 0; done < incrementsPerProc; {
		b, v, err := s.Get(ctx, "counter")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		n, _ := strconv.Atoi(string(b))
		_, err = s.Put(ctx, "counter", []byte(strconv.Itoa(n+1)), storage.IfMatch(v))
		switch {
		case err == nil:
			done++
		case errors.Is(err, storage.ErrPreconditionFailed):
		default:
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

func BenchmarkFilestore(b *testing.B) {
	storetest.BenchmarkStore(b, func(b *testing.B) *storage.Store {
		s, err := openStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		return s.Store
	})
}

// TestLockWaitHonoursContext: a writer waiting for another process's lock
// gives up when its context ends, and writes nothing.
func TestLockWaitHonoursContext(t *testing.T) {
	s := newStore(t)
	if _, err := s.Put(t.Context(), "held/k", []byte("v"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	// Take the key's lock as another process would: through another Store
	// on the directory, whose locks exclude this one's as another
	// process's do.
	other, err := openStore(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	unlockOnce, err := filestore.LockForTest(t.Context(), other, "held/k")
	if err != nil {
		t.Fatal(err)
	}
	unlock := sync.OnceFunc(unlockOnce)
	defer unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = s.Put(ctx, "held/k", []byte("late"), storage.Condition{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put while the lock is held = %v, want DeadlineExceeded", err)
	}
	if err := s.Delete(ctx, "held/k", storage.Condition{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Delete after the deadline = %v", err)
	}
	unlock()
	b, _, err := s.Get(t.Context(), "held/k")
	if err != nil || string(b) != "v" {
		t.Fatalf("value = %q, %v; want the value from before", b, err)
	}
}

// TestInProcessLockWait: a writer waiting for a key's lock held by
// another goroutine of the same Store (the in-process table, not the
// kernel) gives up when its context ends, writers of other keys are not
// held up, and once the lock is released the key is writable.
func TestInProcessLockWait(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	if _, err := s.Put(t.Context(), "held/k", []byte("v"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	unlock, err := filestore.LockForTest(t.Context(), s, "held/k")
	if err != nil {
		t.Fatal(err)
	}
	release := sync.OnceFunc(unlock)
	defer release()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Put(ctx, "held/k", []byte("late"), storage.Condition{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put while another goroutine holds the lock = %v, want DeadlineExceeded", err)
	}
	if _, err := s.Put(t.Context(), "held/other", []byte("o"), storage.Condition{}); err != nil {
		t.Fatalf("Put of another key while held/k is locked: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(t.Context(), "held/k", []byte("next"), storage.Condition{})
		done <- err
	}()
	release()
	if err := <-done; err != nil {
		t.Fatalf("Put after the release: %v", err)
	}
	if b, _, err := s.Get(t.Context(), "held/k"); err != nil || string(b) != "next" {
		t.Fatalf("value = %q, %v; want next", b, err)
	}
}
