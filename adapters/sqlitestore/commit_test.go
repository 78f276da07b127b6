package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/storage"
)

// TestCommitAllOrNone: a Commit whose middle write's condition fails
// writes nothing and names that write's key; one whose conditions hold
// lands whole, each write at its own new version, a Delete of a missing
// key changing nothing, and watchers are signalled for every key.
func TestCommitAllOrNone(t *testing.T) {
	d := newDriver(t)
	s := storage.New(d)
	ctx := t.Context()
	va, err := s.Put(ctx, "a", []byte("a0"), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	vb, err := s.Put(ctx, "b", []byte("b0"), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	before := commits(d)
	_, err = s.Commit(ctx, []storage.Write{
		{Key: "a", Value: []byte("a1"), Cond: storage.IfMatch(va)},
		{Key: "b", Value: []byte("b1"), Cond: storage.IfNotExists()}, // b exists
		{Key: "c", Value: []byte("c1"), Cond: storage.IfNotExists()},
	})
	var oe *storage.OpError
	if !errors.Is(err, storage.ErrPreconditionFailed) || !errors.As(err, &oe) || oe.Key != "b" {
		t.Fatalf("Commit with a failing middle condition: %v, want precondition failed on b", err)
	}
	for k, want := range map[string]string{"a": "a0", "b": "b0"} {
		if got, _, err := s.Get(ctx, k); err != nil || string(got) != want {
			t.Errorf("after the refused Commit, %s = %q %v, want %q", k, got, err, want)
		}
	}
	if _, _, err := s.Get(ctx, "c"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("after the refused Commit, c: %v, want not found", err)
	}
	if got := commits(d) - before; got != 0 {
		t.Errorf("the refused Commit committed %d transactions, want 0 (rolled back)", got)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chs := map[string]<-chan struct{}{}
	for _, p := range []string{"a", "b", "c", "z"} {
		if chs[p], err = s.Watch(wctx, p); err != nil {
			t.Fatal(err)
		}
	}
	vs, err := s.Commit(ctx, []storage.Write{
		{Key: "a", Value: []byte("a1"), Cond: storage.IfMatch(va)},
		{Key: "b", Cond: storage.IfMatch(vb), Delete: true},
		{Key: "c", Value: []byte("c1"), Cond: storage.IfNotExists()},
		{Key: "z", Delete: true}, // missing: nothing to do
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 4 || vs[0] == "" || vs[1] != "" || vs[2] == "" || vs[3] != "" || vs[0] == vs[2] || vs[0] == va {
		t.Fatalf("versions %q: want new, \"\", new (distinct), \"\"", vs)
	}
	if n0, _ := strconv.ParseInt(string(vs[0]), 10, 64); n0 <= mustInt(t, vb) {
		t.Errorf("version %s not after %s: one sequence, never reused", vs[0], vb)
	}
	if got, v, err := s.Get(ctx, "a"); err != nil || string(got) != "a1" || v != vs[0] {
		t.Errorf("a = %q %q %v, want a1 %q", got, v, err, vs[0])
	}
	if _, _, err := s.Get(ctx, "b"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("b: %v, want deleted", err)
	}
	if got, v, err := s.Get(ctx, "c"); err != nil || string(got) != "c1" || v != vs[2] {
		t.Errorf("c = %q %q %v, want c1 %q", got, v, err, vs[2])
	}
	for _, p := range []string{"a", "b", "c"} {
		select {
		case <-chs[p]:
		case <-time.After(2 * time.Second):
			t.Errorf("the watcher of %s was not signalled", p)
		}
	}
	select {
	case <-chs["z"]:
		t.Error("the Delete of a missing key signalled its watcher")
	case <-time.After(50 * time.Millisecond):
	}
}

func mustInt(t *testing.T, v storage.Version) int64 {
	t.Helper()
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCommitInGroup: Commits share one transaction with single writes and
// other Commits; each is checked against the state the ops queued before
// it left, and a refused one undoes none of the others' writes (its own
// writes before the refused one included) and leaves nothing in the
// change log, which holds one row per landed write at its version.
func TestCommitInGroup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	d, err := sqlitestore.NewDriver(t.Context(), sqlitestore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.(io.Closer).Close() })
	s := storage.New(d)
	ctx := t.Context()
	// The lead's commit holds until the others queue: they share the next.
	type step struct {
		name   string
		writes []storage.Write
		wantOK bool
	}
	put := func(k string, c storage.Condition) storage.Write {
		return storage.Write{Key: k, Value: []byte(k), Cond: c}
	}
	// Each step waits for the one before to queue, so the order in the
	// shared transaction is the order here.
	steps := []step{
		{"put g1", []storage.Write{put("g1", storage.IfNotExists())}, true},
		{"commit g2 g3", []storage.Write{put("g2", storage.IfNotExists()), put("g3", storage.IfNotExists())}, true},
		{"commit g4, g1 again (refused)", []storage.Write{put("g4", storage.IfNotExists()), put("g1", storage.IfNotExists())}, false},
		{"put g4 (the refused commit left it free)", []storage.Write{put("g4", storage.IfNotExists())}, true},
		{"commit g5, delete g2", []storage.Write{put("g5", storage.IfNotExists()), {Key: "g2", Delete: true}}, true},
	}
	release := make(chan struct{})
	var once sync.Once
	sqlitestore.SetBeforeCommit(d, func(*sql.Conn) { once.Do(func() { <-release }) })
	leadDone := make(chan error, 1)
	go func() { _, err := s.Put(ctx, "lead", nil, storage.IfNotExists()); leadDone <- err }()
	waitFor(t, func() bool { return commitsStarted(d) })
	before := commits(d)
	errs := make([]error, len(steps))
	vers := make([][]storage.Version, len(steps))
	var wg sync.WaitGroup
	for i, st := range steps {
		wg.Go(func() {
			if len(st.writes) == 1 && !st.writes[0].Delete {
				var v storage.Version
				v, errs[i] = s.Put(ctx, st.writes[0].Key, st.writes[0].Value, st.writes[0].Cond)
				vers[i] = []storage.Version{v}
			} else {
				vers[i], errs[i] = s.Commit(ctx, st.writes)
			}
		})
		waitFor(t, func() bool { return sqlitestore.Waiting(d) == i+1 })
	}
	close(release)
	wg.Wait()
	if err := <-leadDone; err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		if ok := errs[i] == nil; ok != st.wantOK || (!ok && !errors.Is(errs[i], storage.ErrPreconditionFailed)) {
			t.Errorf("%s: %v, want success %v", st.name, errs[i], st.wantOK)
		}
	}
	// lead's commit, then one for all the steps.
	if got := commits(d) - before; got != 2 {
		t.Errorf("%d commits for the lead and the steps, want 2", got)
	}
	want := map[string]bool{"g1": true, "g2": false, "g3": true, "g4": true, "g5": true}
	for k, exists := range want {
		got, _, err := s.Get(ctx, k)
		if exists && (err != nil || string(got) != k) || !exists && !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("%s = %q %v, want exists %v", k, got, err, exists)
		}
	}
	// The log: the steps' landed writes in order, one version each (a
	// Delete's log row takes the next one), nothing of the refused commit.
	var wantLog []string
	next := int64(0)
	for i, st := range steps {
		for j, w := range st.writes {
			if errs[i] != nil {
				continue
			}
			if w.Delete {
				wantLog = append(wantLog, fmt.Sprintf("%d %s", next+1, w.Key))
				next++
				continue
			}
			n := mustInt(t, vers[i][j])
			if next != 0 && n != next+1 {
				t.Errorf("%s: %s at version %d, want %d (the writes' order)", st.name, w.Key, n, next+1)
			}
			wantLog = append(wantLog, fmt.Sprintf("%d %s", n, w.Key))
			next = n
		}
	}
	if got := changeLog(t, path, mustInt(t, vers[0][0])); !slices.Equal(got, wantLog) {
		t.Errorf("change log %q, want %q", got, wantLog)
	}
}

// changeLog reads the change log of the database at path from seq from
// on, as "seq key" lines.
func changeLog(t *testing.T, path string, from int64) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), "SELECT seq, key FROM changes WHERE seq >= ? ORDER BY seq", from)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var seq int64
		var key string
		if err := rows.Scan(&seq, &key); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d %s", seq, key))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// commitsStarted reports whether d's first commit is under way (its lead
// holds the committer): a write queued now waits for the next.
func commitsStarted(d any) bool {
	return sqlitestore.Leading(d)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
	}
}

// TestCommitTwoProcesses: this process and a child move units between two
// counters with Commits conditioned on both versions, at once; every
// move lands whole or not at all, so the counters always sum to zero and
// count every acknowledged move.
func TestCommitTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	ctx := t.Context()
	s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"from", "to"} {
		if _, err := s.Put(ctx, k, []byte("0"), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
	}
	const moves = 150
	cmd, out := startChild(t, "transfer", path, "child", "SQLITESTORE_MOVES="+strconv.Itoa(moves))
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := transfer(ctx, s, moves/3); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, err := readAll(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || strings.TrimSpace(got) != "ok" {
		t.Fatalf("child: %q %v", got, err)
	}
	total := 2 * moves
	for k, want := range map[string]int{"from": -total, "to": total} {
		v, _, err := s.Get(ctx, k)
		if n, _ := strconv.Atoi(string(v)); err != nil || n != want {
			t.Errorf("%s = %s %v, want %d", k, v, err, want)
		}
	}
}

// transfer moves n units from "from" to "to", one Commit each, retrying a
// move whose read went stale.
func transfer(ctx context.Context, s *storage.Store, n int) error {
	for done := 0; done < n; {
		a, va, err := s.Get(ctx, "from")
		if err != nil {
			return err
		}
		b, vb, err := s.Get(ctx, "to")
		if err != nil {
			return err
		}
		x, _ := strconv.Atoi(string(a))
		y, _ := strconv.Atoi(string(b))
		_, err = s.Commit(ctx, []storage.Write{
			{Key: "from", Value: []byte(strconv.Itoa(x - 1)), Cond: storage.IfMatch(va)},
			{Key: "to", Value: []byte(strconv.Itoa(y + 1)), Cond: storage.IfMatch(vb)},
		})
		switch {
		case err == nil:
			done++
		case !errors.Is(err, storage.ErrPreconditionFailed):
			return fmt.Errorf("move: %w", err)
		}
	}
	return nil
}

func readAll(r io.Reader) (string, error) {
	b, err := io.ReadAll(r)
	return string(b), err
}

// TestWatchOwnAndOther: the poller skips the versions this Store wrote
// itself, but not another handle's write landing between two of them.
func TestWatchOwnAndOther(t *testing.T) {
	ctx := t.Context()
	a, b, _ := openTwo(t, sqlitestore.Config{WatchInterval: 5 * time.Millisecond})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := a.Watch(wctx, "b/")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		// a's own writes before and after b's, within one poll interval.
		for j := range 3 {
			if _, err := a.Put(ctx, fmt.Sprintf("a/%d-%d", i, j), nil, storage.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.Put(ctx, fmt.Sprintf("b/%d", i), nil, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			if _, err := a.Put(ctx, fmt.Sprintf("a/%d-after-%d", i, j), nil, storage.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: another handle's write between this Store's own was not signalled", i)
		}
	}
	// a's own writes alone signal nothing under b/.
	for j := range 5 {
		if _, err := a.Put(ctx, fmt.Sprintf("a/x-%d", j), nil, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-ch:
		t.Fatal("this Store's own writes outside the prefix signalled it")
	case <-time.After(100 * time.Millisecond):
	}
}
