//go:build unix

package sqlitestore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/storage"
)

// holdLock takes the write lock of the database at path as another process
// would (a second open file description of -lock), until release is
// called.
func holdLock(t *testing.T, path string) (release func()) {
	t.Helper()
	f, err := os.OpenFile(path+"-lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = f.Close() }) }
	t.Cleanup(release)
	return release
}

// TestLockWaitEnds: writes waiting for another process's write lock give
// up when their context ends, or when BusyTimeout passes, within a few
// polls, with a *BusyError that says nothing was written (never "outcome
// unknown"); queued writes give up alike; once the lock is free, writes
// go through and nothing of the abandoned ones landed.
func TestLockWaitEnds(t *testing.T) {
	const wait = 200 * time.Millisecond
	for _, tc := range []struct {
		name      string
		busy      time.Duration // Config.BusyTimeout
		ctxWait   time.Duration // the writes' context timeout, 0 for none
		kind      error         // what the error matches besides *BusyError
		transient bool
	}{
		{"context ends", time.Minute, wait, context.DeadlineExceeded, false},
		{"busy timeout", wait, 0, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "store.db")
			s, err := sqlitestore.New(t.Context(), sqlitestore.Config{Path: path, BusyTimeout: tc.busy})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Put(t.Context(), "before", nil, storage.IfNotExists()); err != nil {
				t.Fatal(err)
			}
			release := holdLock(t, path)

			// One leader and several writes queued behind it, deletes too.
			const n = 6
			errs := make([]error, n)
			took := make([]time.Duration, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					ctx := context.Background()
					if tc.ctxWait > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tc.ctxWait)
						defer cancel()
					}
					start := time.Now()
					if i == n-1 {
						errs[i] = s.Delete(ctx, "before", storage.Condition{})
					} else {
						_, errs[i] = s.Put(ctx, "k"+string(rune('a'+i)), []byte("v"), storage.IfNotExists())
					}
					took[i] = time.Since(start)
				})
			}
			wg.Wait()
			for i, err := range errs {
				var be *sqlitestore.BusyError
				switch {
				case !errors.As(err, &be) || be.Path != path:
					t.Errorf("write %d: %v, want a *BusyError on %s", i, err, path)
				case errors.Is(err, storage.ErrOutcomeUnknown):
					t.Errorf("write %d: %v matches ErrOutcomeUnknown: nothing was sent", i, err)
				case tc.kind != nil && !errors.Is(err, tc.kind):
					t.Errorf("write %d: %v, want it to match %v", i, err, tc.kind)
				case storage.Transient(err) != tc.transient:
					t.Errorf("write %d: Transient(%v) = %v, want %v", i, err, !tc.transient, tc.transient)
				}
				if took[i] < wait-10*time.Millisecond || took[i] > wait+100*time.Millisecond {
					t.Errorf("write %d returned after %s, want about %s", i, took[i], wait)
				}
			}

			release()
			if _, err := s.Put(t.Context(), "after", nil, storage.IfNotExists()); err != nil {
				t.Fatalf("write once the lock is free: %v", err)
			}
			if _, _, err := s.Get(t.Context(), "before"); err != nil {
				t.Errorf("the abandoned delete landed: %v", err)
			}
			for i := range n - 1 {
				if _, _, err := s.Get(t.Context(), "k"+string(rune('a'+i))); !errors.Is(err, storage.ErrNotFound) {
					t.Errorf("abandoned write %d: Get = %v, want not found", i, err)
				}
			}
		})
	}
}
