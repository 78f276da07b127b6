//go:build unix

package filestore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/storage"
)

// TestValueFileIsTheValue: what the SDK writes at a key is exactly the
// value's bytes, so jq and other tools read status.json as it is, and
// rewriting identical bytes still changes the version.
func TestValueFileIsTheValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		value []byte
	}{
		{"json", []byte(`{"run_id":"r1","status":"running"}`)},
		{"empty", nil},
		{"looks like the old header", []byte("cnv1 0123456789abcdef0123456789abcdef\nvalue")},
		{"binary", []byte{0, 1, 2, 0xff, '\n'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			const key = "agents/a/runs/r1/status.json"
			v1, err := s.Put(t.Context(), key, tc.value, storage.IfNotExists())
			if err != nil {
				t.Fatal(err)
			}
			v2, err := s.Put(t.Context(), key, tc.value, storage.IfMatch(v1))
			if err != nil || v2 == v1 {
				t.Fatalf("identical rewrite = %q, %v; want a new version", v2, err)
			}
			raw, err := os.ReadFile(filepath.Join(s.Root(), filepath.FromSlash(key)))
			if err != nil || !bytes.Equal(raw, tc.value) {
				t.Fatalf("file bytes = %q, %v; want exactly %q", raw, err, tc.value)
			}
			b, v, err := s.Get(t.Context(), key)
			if err != nil || !bytes.Equal(b, tc.value) || v != v2 {
				t.Fatalf("Get = %q %q %v; want %q at %q", b, v, err, tc.value, v2)
			}
		})
	}
}

// TestForeignFile: a plain file placed at a key by another tool is a
// value: it can be read, and overwritten or deleted unconditionally or with
// IfMatch of the version Get returned, never with a stale or create-only
// condition.
func TestForeignFile(t *testing.T) {
	t.Parallel()
	const key = "agents/a/runs/r1/status.json"
	foreign := []byte(`{"status":"queued"}` + "\n")
	type write func(s *fsStore, got storage.Version) (storage.Version, error)
	put := func(cond func(storage.Version) storage.Condition) write {
		return func(s *fsStore, got storage.Version) (storage.Version, error) {
			return s.Put(context.Background(), key, []byte("next"), cond(got))
		}
	}
	del := func(cond func(storage.Version) storage.Condition) write {
		return func(s *fsStore, got storage.Version) (storage.Version, error) {
			return "", s.Delete(context.Background(), key, cond(got))
		}
	}
	uncond := func(storage.Version) storage.Condition { return storage.Condition{} }
	stale := func(storage.Version) storage.Condition { return storage.IfMatch("0123456789abcdef0123456789abcdef") }
	for _, tc := range []struct {
		name    string
		op      write
		want    []byte // the file afterwards; nil: deleted
		wantErr error
	}{
		{"put unconditional", put(uncond), []byte("next"), nil},
		{"put if-match read version", put(storage.IfMatch), []byte("next"), nil},
		{"put if-match stale", put(stale), foreign, storage.ErrPreconditionFailed},
		{"put if-not-exists", put(func(storage.Version) storage.Condition { return storage.IfNotExists() }), foreign, storage.ErrPreconditionFailed},
		{"delete unconditional", del(uncond), nil, nil},
		{"delete if-match read version", del(storage.IfMatch), nil, nil},
		{"delete if-match stale", del(stale), foreign, storage.ErrPreconditionFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			path := filepath.Join(s.Root(), filepath.FromSlash(key))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, foreign, 0o644); err != nil {
				t.Fatal(err)
			}
			b, got, err := s.Get(t.Context(), key)
			if err != nil || !bytes.Equal(b, foreign) || got == "" {
				t.Fatalf("Get of a foreign file = %q %q %v, want its bytes and a version", b, got, err)
			}
			if _, again, _ := s.Get(t.Context(), key); again != got {
				t.Fatalf("version of an unchanged foreign file moved: %q, then %q", got, again)
			}
			v, err := tc.op(s, got)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			raw, rerr := os.ReadFile(path)
			switch {
			case tc.want == nil:
				if !errors.Is(rerr, os.ErrNotExist) {
					t.Fatalf("file after delete: %q, %v", raw, rerr)
				}
				return
			case !bytes.Equal(raw, tc.want):
				t.Fatalf("file = %q, want %q", raw, tc.want)
			}
			if v == "" {
				return
			}
			if _, after, _ := s.Get(t.Context(), key); after != v || after == got {
				t.Fatalf("version after the write = %q, want %q (not the foreign %q)", after, v, got)
			}
		})
	}
}

// TestInPlaceEditChangesVersion: another tool rewriting an SDK file in
// place (jq ... > status.json keeps the inode and its attribute) changes
// its version, so a compare-and-swap on the version from before the edit
// fails instead of overwriting the edit.
func TestInPlaceEditChangesVersion(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	const key = "jobs/j1.json"
	v1, err := s.Put(t.Context(), key, []byte(`{"status":"QUEUED"}`), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	for i, edit := range []string{`{"status":"DEAD"}`, `{"status":"DEAD!"}`, `{"status":"QUEUED"}`} {
		// Same size for the last two: only the mtime tells them apart,
		// and it moves at least a tick between writes.
		time.Sleep(20 * time.Millisecond)
		f, err := os.OpenFile(filepath.Join(s.Root(), key), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString(edit)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		b, v, err := s.Get(t.Context(), key)
		if err != nil || string(b) != edit || v == v1 {
			t.Fatalf("edit %d: Get = %q %q %v; want %q at a version other than %q", i, b, v, err, edit, v1)
		}
		if _, err := s.Put(t.Context(), key, []byte("late"), storage.IfMatch(v1)); !errors.Is(err, storage.ErrPreconditionFailed) {
			t.Fatalf("edit %d: Put IfMatch(version before the edit) = %v, want ErrPreconditionFailed", i, err)
		}
	}
}

// TestPausedLockHolder: a process holding a key's writer lock is paused
// (SIGSTOP, as a GC pause or a frozen VM would). Writers of that key give
// up when their context ends, with its error, and write nothing; writers
// of other keys in the same directory are not held up; once the holder is
// killed, the key is writable again.
func TestPausedLockHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	s := newStore(t)
	const held, sibling, elsewhere = "agents/a/runs/r1/status.json", "agents/a/runs/r1/manifest.json", "jobs/j1.json"
	if _, err := s.Put(t.Context(), held, []byte("before"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), lockChildEnv+"="+held+" "+s.Root())
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := child.StdinPipe() // the child holds the lock until stdin closes
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = stdin.Close()
		_ = child.Wait()
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	const deadline = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		op   func(ctx context.Context) error
	}{
		{"put", func(ctx context.Context) error {
			_, err := s.Put(ctx, held, []byte("late"), storage.Condition{})
			return err
		}},
		{"put if-match", func(ctx context.Context) error {
			_, v, err := s.Get(ctx, held)
			if err != nil {
				return err
			}
			_, err = s.Put(ctx, held, []byte("late"), storage.IfMatch(v))
			return err
		}},
		{"delete", func(ctx context.Context) error { return s.Delete(ctx, held, storage.Condition{}) }},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		others := make(chan error, 1)
		var othersTook time.Duration
		go func() {
			// Meanwhile, other keys (one in the same directory) are writable.
			start := time.Now()
			for i, k := range []string{sibling, elsewhere} {
				if _, err := s.Put(context.Background(), k, []byte(fmt.Sprint(tc.name, i)), storage.Condition{}); err != nil {
					others <- err
					return
				}
			}
			othersTook = time.Since(start)
			others <- nil
		}()
		start := time.Now()
		err := tc.op(ctx)
		took := time.Since(start)
		cancel()
		if oerr := <-others; oerr != nil {
			t.Fatalf("%s: writing other keys while %s is locked: %v", tc.name, held, oerr)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s while a paused process holds the lock = %v, want DeadlineExceeded", tc.name, err)
		}
		if took > deadline+time.Second {
			t.Fatalf("%s returned %v after a %v deadline", tc.name, took, deadline)
		}
		if othersTook >= deadline {
			t.Fatalf("%s: writing two other keys took %v, as long as the locked key's deadline", tc.name, othersTook)
		}
		t.Logf("%s: gave up after %v (deadline %v); two other keys written meanwhile in %v", tc.name, took.Round(time.Millisecond), deadline, othersTook.Round(time.Microsecond))
	}
	if b, _, err := s.Get(t.Context(), held); err != nil || string(b) != "before" {
		t.Fatalf("locked key = %q, %v; want it untouched", b, err)
	}

	// A killed holder's lock is the kernel's to release: no stale lock.
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := s.Put(ctx, held, []byte("after"), storage.Condition{}); err != nil {
		t.Fatalf("Put after the holder was killed: %v", err)
	}
}

// childHoldLock is the body of TestPausedLockHolder's child: take the lock
// of one key through the package's own locking, say so, and hold it until
// stdin closes (or the process is killed).
func childHoldLock(arg string) int {
	key, dir, _ := strings.Cut(arg, " ") // keys here have no space
	s, err := openStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	unlock, err := filestore.LockForTest(context.Background(), s, key)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer unlock()
	fmt.Println("locked")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}
