package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

func TestMain(m *testing.M) {
	if child() {
		return
	}
	goleak.VerifyTestMain(m)
}

// newDriver opens a driver on a fresh file, closed when t ends.
func newDriver(t testing.TB) driver.Store {
	t.Helper()
	d, err := sqlitestore.NewDriver(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "store.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.(io.Closer).Close() })
	return d
}

func TestConformance(t *testing.T) {
	storetest.TestDriver(t, func(t *testing.T) driver.Store { return newDriver(t) }, storetest.Capabilities{})
}

func TestConfig(t *testing.T) {
	ctx := t.Context()
	for _, path := range []string{"", "a?b"} {
		if _, err := sqlitestore.New(ctx, sqlitestore.Config{Path: path}); err == nil {
			t.Errorf("New(%q) succeeded", path)
		}
	}
	// Nested directories are created; a reopened file keeps its data.
	path := filepath.Join(t.TempDir(), "a", "b", "store.db")
	s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Put(ctx, "k", []byte("v"), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s, err = sqlitestore.New(ctx, sqlitestore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, gv, err := s.Get(ctx, "k"); err != nil || string(got) != "v" || gv != v {
		t.Fatalf("after reopen: %q %q %v, want v %q", got, gv, err, v)
	}
	// Closing twice is harmless; a closed Store refuses to watch.
	closed, err := sqlitestore.New(ctx, sqlitestore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := closed.Watch(ctx, ""); err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	_ = closed.Close()
	if _, err := closed.Watch(ctx, ""); err == nil {
		t.Error("a closed Store watches")
	}
	// A version after reopening is still new: the sequence is in the file.
	v2, err := s.Put(ctx, "k", []byte("v"), storage.Condition{})
	if err != nil || v2 == v {
		t.Fatalf("Put after reopen: %q %v (old %q)", v2, err, v)
	}
}

// TestGroupCommit: one writer commits once per write, on its own
// goroutine; writes arriving during a commit share the next one, each
// checked against the state its batch reached and answered alone.
func TestGroupCommit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		writers int
		// keys[i] is the key writer i writes, create-only.
		sameKey     bool
		wantCommits int64
		wantOK      int
	}{
		{"W=1", 1, false, 2, 2},
		{"W=16 distinct keys", 16, false, 2, 16},
		{"W=16 one key", 16, true, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t)
			s := storage.New(d)
			ctx := t.Context()
			// The first commit holds until the other writers queue, so
			// they must share the second.
			first := make(chan struct{})
			var once sync.Once
			sqlitestore.SetBeforeCommit(d, func(*sql.Conn) {
				once.Do(func() {
					for deadline := time.Now().Add(5 * time.Second); sqlitestore.Waiting(d) < tc.writers-1; time.Sleep(time.Millisecond) {
						if time.Now().After(deadline) {
							t.Errorf("%d writers queued after 5 s, want %d", sqlitestore.Waiting(d), tc.writers-1)
							break
						}
					}
					close(first)
				})
			})
			if tc.writers == 1 {
				// One writer, two writes: each commits inline.
				for i := range 2 {
					if _, err := s.Put(ctx, fmt.Sprintf("k%d", i), []byte("x"), storage.IfNotExists()); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				// Whichever write leads commits alone (the queue was
				// empty when it began); the others share the next commit.
				var wg sync.WaitGroup
				var mu sync.Mutex
				ok, failed := 0, 0
				for i := range tc.writers {
					key := fmt.Sprintf("k%d", i)
					if tc.sameKey && i > 0 {
						key = "same"
					}
					wg.Go(func() {
						_, err := s.Put(ctx, key, []byte("x"), storage.IfNotExists())
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							ok++
						case errors.Is(err, storage.ErrPreconditionFailed):
							failed++
						default:
							t.Error(err)
						}
					})
				}
				wg.Wait()
				<-first
				if ok != tc.wantOK || ok+failed != tc.writers {
					t.Errorf("%d succeeded and %d failed, want %d of %d", ok, failed, tc.wantOK, tc.writers)
				}
			}
			if got := sqlitestore.Commits(d); got != tc.wantCommits {
				t.Errorf("%d commits, want %d", got, tc.wantCommits)
			}
		})
	}
}

// TestFailedCommit: a commit that fails answers outcome unknown, and the
// next write works on a reopened connection.
func TestFailedCommit(t *testing.T) {
	d := newDriver(t)
	s := storage.New(d)
	ctx := t.Context()
	fail := true
	sqlitestore.SetBeforeCommit(d, func(c *sql.Conn) {
		if fail {
			fail = false
			_ = c.Close() // the connection under the COMMIT is gone
		}
	})
	_, err := s.Put(ctx, "k", []byte("1"), storage.IfNotExists())
	if !errors.Is(err, storage.ErrOutcomeUnknown) {
		t.Fatalf("Put over a failed commit: %v, want outcome unknown", err)
	}
	if _, err := s.Put(ctx, "k", []byte("2"), storage.Condition{}); err != nil {
		t.Fatalf("Put after a failed commit: %v", err)
	}
	if got, _, err := s.Get(ctx, "k"); err != nil || string(got) != "2" {
		t.Fatalf("Get: %q %v", got, err)
	}
}

// TestWatchOtherHandle: a commit by another handle on the file (as by
// another process) wakes a watcher through the doorbell.
func TestWatchOtherHandle(t *testing.T) {
	ctx := t.Context()
	a, b, _ := openTwo(t, sqlitestore.Config{})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := a.Watch(wctx, "w/")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := b.Put(ctx, fmt.Sprintf("w/%d", i), nil, storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			t.Fatalf("write %d by another handle not signalled", i)
		}
	}
	if _, err := b.Put(ctx, "other/x", nil, storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("signalled for a key outside the prefix")
	case <-time.After(100 * time.Millisecond):
	}
}

func BenchmarkStore(b *testing.B) {
	storetest.BenchmarkStore(b, func(b *testing.B) *storage.Store { return storage.New(newDriver(b)) })
}

func BenchmarkListAfter(b *testing.B) {
	storetest.BenchmarkListAfter(b, func(b *testing.B) *storage.Store { return storage.New(newDriver(b)) }, 1000, 100_000)
}

// openTwo opens two Stores on one new file, as two processes would: a
// with cfg (its Path set here), b with the defaults. Both are closed when
// the test ends; path is the file's.
func openTwo(t *testing.T, cfg sqlitestore.Config) (a, b *storage.Store, path string) {
	t.Helper()
	cfg.Path = filepath.Join(t.TempDir(), "store.db")
	var err error
	if a, err = sqlitestore.New(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if b, err = sqlitestore.New(t.Context(), sqlitestore.Config{Path: cfg.Path}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return a, b, cfg.Path
}

func commits(d driver.Store) int64 { return sqlitestore.Commits(d) }

// TestWatchPrunedLog: the change log stays a bounded tail, and a watcher
// that fell behind it (its entries pruned before it read them) is still
// signalled.
func TestWatchPrunedLog(t *testing.T) {
	sqlitestore.SetPruning(t, 4, 4)
	ctx := t.Context()
	a, b, path := openTwo(t, sqlitestore.Config{WatchInterval: 300 * time.Millisecond})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := a.Watch(wctx, "g/")
	if err != nil {
		t.Fatal(err)
	}
	// Between two of a's polls: the write under g/, then enough others
	// that its entry is pruned.
	start := time.Now()
	if _, err := b.Put(ctx, "g/1", nil, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := b.Put(ctx, fmt.Sprintf("o/%d", i), nil, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	if time.Since(start) > 250*time.Millisecond {
		t.Skip("the writes took longer than a poll interval; the prune may not have outrun the watcher")
	}
	select {
	case <-ch:
	case <-time.After(2 * time.Second):
		t.Fatal("a write whose log entry was pruned unread was not signalled")
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM changes").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 8 {
		t.Errorf("the change log holds %d entries after 21 writes, want at most keep+every = 8", n)
	}
}

// earlierSchema is the schema the first release of this package made: kv
// a WITHOUT ROWID table. Such a file is read and written as it is.
var earlierSchema = []string{
	"CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
	"CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, version INTEGER NOT NULL) WITHOUT ROWID",
	"CREATE TABLE changes (seq INTEGER PRIMARY KEY, key TEXT NOT NULL, writer INTEGER NOT NULL)",
	"INSERT INTO meta (name, value) VALUES ('schema', 1), ('seq', 0)",
}

// TestConformanceEarlierLayout runs the whole contract on files made with
// the earlier layout, and checks they keep it (nothing migrates them).
func TestConformanceEarlierLayout(t *testing.T) {
	storetest.TestDriver(t, func(t *testing.T) driver.Store {
		path := filepath.Join(t.TempDir(), "store.db")
		makeEarlier(t, path)
		d, err := sqlitestore.NewDriver(context.Background(), sqlitestore.Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = d.(io.Closer).Close()
			if got := kvSQL(t, path); !strings.Contains(got, "WITHOUT ROWID") {
				t.Errorf("the earlier layout was changed: %s", got)
			}
		})
		return d
	}, storetest.Capabilities{})
}

// TestLayout: a new file's kv is a rowid table (a WITHOUT ROWID one spills
// job records into overflow pages: docs/performance.md).
func TestLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := sqlitestore.New(t.Context(), sqlitestore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if got := kvSQL(t, path); strings.Contains(got, "WITHOUT ROWID") {
		t.Errorf("kv is %s, want a rowid table", got)
	}
}

func makeEarlier(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range earlierSchema {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

func kvSQL(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var q string
	if err := db.QueryRow("SELECT sql FROM sqlite_schema WHERE name = 'kv'").Scan(&q); err != nil {
		t.Fatal(err)
	}
	return q
}
