// Package storetest is the conformance suite for storage.Store adapters.
// Every adapter's tests call TestDriver (or Run with a Harness), as
// gocloud.dev's blob/drivertest and testing/fstest.TestFS do, so all
// adapters are held to one written contract (the doc comments of
// storage.Store) by one set of tests. A Harness can point the suite at a
// store that already runs (a prefix of an existing bucket, a directory):
// the conveyor command's conformance check does.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/storage"
)

func ctxT(t *testing.T) context.Context { return t.Context() }

func mustPut(t *testing.T, s *storage.Store, key string, value []byte, cond storage.Condition) storage.Version {
	t.Helper()
	v, err := s.Put(ctxT(t), key, value, cond)
	if err != nil {
		t.Fatalf("Put(%q, %s): %v", short(key), cond, err)
	}
	if v == "" {
		t.Fatalf("Put(%q) returned an empty version", short(key))
	}
	return v
}

func mustGet(t *testing.T, s *storage.Store, key string) ([]byte, storage.Version) {
	t.Helper()
	b, v, err := s.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", short(key), err)
	}
	return b, v
}

func wantGet(t *testing.T, s *storage.Store, key string, value []byte, version storage.Version) {
	t.Helper()
	b, v := mustGet(t, s, key)
	if !bytes.Equal(b, value) {
		t.Fatalf("Get(%q) = %q, want %q", short(key), trunc(b), trunc(value))
	}
	if version != "" && v != version {
		t.Fatalf("Get(%q) version = %q, want %q", short(key), v, version)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error = %v, want one matching %v", what, err, target)
	}
}

func wantMissing(t *testing.T, s *storage.Store, key string) {
	t.Helper()
	_, _, err := s.Get(ctxT(t), key)
	wantErr(t, fmt.Sprintf("Get(%q)", key), err, storage.ErrNotFound)
}

func short(key string) string {
	if len(key) > 60 {
		return key[:60] + "..."
	}
	return key
}

func trunc(b []byte) []byte {
	if len(b) > 64 {
		return append(slices.Clone(b[:64]), "..."...)
	}
	return b
}

func listAll(t *testing.T, s *storage.Store, prefix string) []string {
	t.Helper()
	keys := []string{}
	for k, err := range s.List(ctxT(t), prefix) {
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		keys = append(keys, k)
	}
	return keys
}

func testGetMissing(t *testing.T, s *storage.Store) {
	b, v, err := s.Get(ctxT(t), "nothing/here.json")
	wantErr(t, "Get of a missing key", err, storage.ErrNotFound)
	if b != nil || v != "" {
		t.Errorf("Get of a missing key returned value %q, version %q", b, v)
	}
}

func testReadAfterWrite(t *testing.T, s *storage.Store) {
	const key = "agents/a/runs/r1/status.json"
	v1 := mustPut(t, s, key, []byte(`{"status":"queued"}`), storage.Condition{})
	wantGet(t, s, key, []byte(`{"status":"queued"}`), v1)
	v2 := mustPut(t, s, key, []byte(`{"status":"running"}`), storage.Condition{})
	if v2 == v1 {
		t.Fatalf("overwrite kept version %q", v1)
	}
	wantGet(t, s, key, []byte(`{"status":"running"}`), v2)
	// A sibling key is independent.
	wantMissing(t, s, "agents/a/runs/r1/manifest.json")
}

func testEmptyValue(t *testing.T, s *storage.Store) {
	v := mustPut(t, s, "empty", nil, storage.IfNotExists())
	b, got := mustGet(t, s, "empty")
	if len(b) != 0 || got != v {
		t.Fatalf("Get(empty) = %q, %q; want empty value at %q", b, got, v)
	}
}

func testValuesAreCopied(t *testing.T, s *storage.Store) {
	in := []byte("original")
	mustPut(t, s, "k", in, storage.Condition{})
	copy(in, "mutated!")
	out, _ := mustGet(t, s, "k")
	if string(out) != "original" {
		t.Fatalf("store kept the caller's slice: got %q", out)
	}
	copy(out, "changed!")
	wantGet(t, s, "k", []byte("original"), "")
}

// testIdenticalBodies guards the ABA trap of content-addressed versions
// (S3 ETags are the MD5 of the body): writing the same bytes again must
// still produce a new version, and the old version must stop matching.
// With ContentVersions, an identical rewrite may keep the version; then a
// compare-and-swap with it acts on the very bytes it was issued for, and
// the suite checks only that versions of different bytes never match.
func testIdenticalBodies(t *testing.T, s *storage.Store, o Capabilities) {
	const key = "same.json"
	a, b := []byte(`{"n":1}`), []byte(`{"n":9}`)
	v1 := mustPut(t, s, key, a, storage.IfNotExists())
	v2 := mustPut(t, s, key, a, storage.IfMatch(v1))
	if v1 == v2 && !o.ContentVersions {
		t.Fatalf("rewriting identical bytes returned the same version %q", v1)
	}
	// A -> B -> A: versions of B must differ from A's, and (but for
	// content versions) the second A's from the first A's.
	v3 := mustPut(t, s, key, b, storage.IfMatch(v2))
	if v3 == v1 || v3 == v2 {
		t.Fatalf("different bytes got the version %q of earlier bytes", v3)
	}
	v4 := mustPut(t, s, key, a, storage.Condition{})
	if v4 == v3 {
		t.Fatalf("different bytes got the version %q of the bytes they replaced", v3)
	}
	for _, old := range []struct {
		name string
		v    storage.Version
		same bool // issued for the bytes the key holds now
	}{{"first A", v1, true}, {"rewritten A", v2, true}, {"B", v3, false}} {
		if old.v == v4 && !(o.ContentVersions && old.same) {
			t.Fatalf("version %q of %s reused after A-B-A writes", old.v, old.name)
		}
		if old.v == v4 {
			continue // a content version of the current bytes: it is current
		}
		_, err := s.Put(ctxT(t), key, []byte("x"), storage.IfMatch(old.v))
		wantErr(t, "Put IfMatch(stale version of "+old.name+" after A-B-A)", err, storage.ErrPreconditionFailed)
		err = s.Delete(ctxT(t), key, storage.IfMatch(old.v))
		wantErr(t, "Delete IfMatch(stale version of "+old.name+" after A-B-A)", err, storage.ErrPreconditionFailed)
	}
	wantGet(t, s, key, a, v4)
}

func testPutConditions(t *testing.T, s *storage.Store) {
	// A version taken from another key: well-formed, but not this key's.
	foreign := mustPut(t, s, "other", []byte("o"), storage.Condition{})

	tests := []struct {
		name    string
		setup   bool // key exists before the Put
		cond    func(cur storage.Version) storage.Condition
		wantErr error
	}{
		{"unconditional/missing", false, func(storage.Version) storage.Condition { return storage.Condition{} }, nil},
		{"unconditional/existing", true, func(storage.Version) storage.Condition { return storage.Condition{} }, nil},
		{"if-not-exists/missing", false, func(storage.Version) storage.Condition { return storage.IfNotExists() }, nil},
		{"if-not-exists/existing", true, func(storage.Version) storage.Condition { return storage.IfNotExists() }, storage.ErrPreconditionFailed},
		{"if-match/current", true, storage.IfMatch, nil},
		{"if-match/stale", true, func(storage.Version) storage.Condition { return storage.IfMatch(foreign) }, storage.ErrPreconditionFailed},
		{"if-match/missing-key", false, func(storage.Version) storage.Condition { return storage.IfMatch(foreign) }, storage.ErrPreconditionFailed},
		{"if-match/empty-version", true, func(storage.Version) storage.Condition { return storage.IfMatch("") }, storage.ErrInvalidCondition},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "cond/" + strings.ReplaceAll(tc.name, "/", "-")
			var cur storage.Version
			if tc.setup {
				cur = mustPut(t, s, key, []byte("before"), storage.Condition{})
			}
			v, err := s.Put(ctxT(t), key, []byte("after"), tc.cond(cur))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Put: %v", err)
				}
				wantGet(t, s, key, []byte("after"), v)
				return
			}
			wantErr(t, "Put", err, tc.wantErr)
			if errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("Put with a failed condition also matches ErrNotFound: %v", err)
			}
			if v != "" {
				t.Errorf("failed Put returned version %q", v)
			}
			if tc.setup {
				wantGet(t, s, key, []byte("before"), cur)
			} else {
				wantMissing(t, s, key)
			}
		})
	}
}

func testDeleteConditions(t *testing.T, s *storage.Store) {
	foreign := mustPut(t, s, "other", []byte("o"), storage.Condition{})
	tests := []struct {
		name       string
		setup      bool
		cond       func(cur storage.Version) storage.Condition
		wantErr    error
		wantExists bool
	}{
		{"unconditional/existing", true, func(storage.Version) storage.Condition { return storage.Condition{} }, nil, false},
		{"unconditional/missing", false, func(storage.Version) storage.Condition { return storage.Condition{} }, nil, false},
		{"if-match/current", true, storage.IfMatch, nil, false},
		{"if-match/stale", true, func(storage.Version) storage.Condition { return storage.IfMatch(foreign) }, storage.ErrPreconditionFailed, true},
		{"if-match/missing-key", false, func(storage.Version) storage.Condition { return storage.IfMatch(foreign) }, storage.ErrPreconditionFailed, false},
		{"if-not-exists", true, func(storage.Version) storage.Condition { return storage.IfNotExists() }, storage.ErrInvalidCondition, true},
		{"if-match/empty-version", true, func(storage.Version) storage.Condition { return storage.IfMatch("") }, storage.ErrInvalidCondition, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "del/" + strings.ReplaceAll(tc.name, "/", "-")
			var cur storage.Version
			if tc.setup {
				cur = mustPut(t, s, key, []byte("v"), storage.Condition{})
			}
			err := s.Delete(ctxT(t), key, tc.cond(cur))
			if tc.wantErr == nil && err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if tc.wantErr != nil {
				wantErr(t, "Delete", err, tc.wantErr)
			}
			if tc.wantExists {
				wantGet(t, s, key, []byte("v"), cur)
			} else {
				wantMissing(t, s, key)
			}
		})
	}
}

// testConditionalDeleteAtomic races, round after round, a Delete
// IfMatch(v) against a compare-and-swap from the same v: one of the two
// must win and the other fail its condition. Both winning means the Delete
// checked the version and then deleted what the swap wrote in between
// (MinIO's HEAD then DELETE), which a store declaring
// NonAtomicConditionalDelete is allowed to do; there the check skips.
func testConditionalDeleteAtomic(t *testing.T, s *storage.Store, c Capabilities) {
	if c.NonAtomicConditionalDelete {
		t.Skip("the store declares NonAtomicConditionalDelete: its conditional Delete is checked against one writer at a time only")
	}
	bad, err := conditionalDeleteRaces(ctxT(t), s, 40)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("%d of 40 rounds broke a conditional Delete racing a compare-and-swap of the same version, e.g. %s", len(bad), bad[0])
	}
}

// conditionalDeleteRaces runs rounds of testConditionalDeleteAtomic's race
// and describes the rounds where the Delete and the swap did not end with
// exactly one winner; an error is anything else that went wrong.
func conditionalDeleteRaces(ctx context.Context, s *storage.Store, rounds int) ([]string, error) {
	var bad []string
	for i := range rounds {
		key := fmt.Sprintf("cdel/%02d", i)
		v0, err := s.Put(ctx, key, []byte("before"), storage.IfNotExists())
		if err != nil {
			return bad, fmt.Errorf("Put(%q): %w", key, err)
		}
		var casErr, delErr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; _, casErr = s.Put(ctx, key, []byte("swapped"), storage.IfMatch(v0)) })
		wg.Go(func() { <-start; delErr = s.Delete(ctx, key, storage.IfMatch(v0)) })
		close(start)
		wg.Wait()
		for _, e := range []error{casErr, delErr} {
			if e != nil && !errors.Is(e, storage.ErrPreconditionFailed) {
				return bad, fmt.Errorf("round %d: %w", i, e)
			}
		}
		_, _, getErr := s.Get(ctx, key)
		switch {
		case casErr == nil && delErr == nil:
			bad = append(bad, fmt.Sprintf("round %d: both won (afterwards the key %s)", i, presence(getErr)))
		case casErr != nil && delErr != nil:
			bad = append(bad, fmt.Sprintf("round %d: both failed", i))
		case casErr == nil && getErr != nil:
			bad = append(bad, fmt.Sprintf("round %d: the swap won, but the key reads %v", i, getErr))
		case delErr == nil && !errors.Is(getErr, storage.ErrNotFound):
			bad = append(bad, fmt.Sprintf("round %d: the Delete won, but the key %s", i, presence(getErr)))
		}
	}
	return bad, nil
}

func presence(getErr error) string {
	switch {
	case getErr == nil:
		return "exists"
	case errors.Is(getErr, storage.ErrNotFound):
		return "is missing"
	}
	return "reads " + getErr.Error()
}

func testRecreateAfterDelete(t *testing.T, s *storage.Store, o Capabilities) {
	const key = "jobs/j1.json"
	v1 := mustPut(t, s, key, []byte("a"), storage.IfNotExists())
	if err := s.Delete(ctxT(t), key, storage.IfMatch(v1)); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantMissing(t, s, key)
	if got := listAll(t, s, "jobs/"); len(got) != 0 {
		t.Fatalf("List after Delete = %q, want none", got)
	}
	// Re-created with other bytes: the old version must not match.
	v2 := mustPut(t, s, key, []byte("b"), storage.IfNotExists())
	if v2 == v1 {
		t.Fatalf("re-created key with other bytes reused version %q", v1)
	}
	_, err := s.Put(ctxT(t), key, []byte("c"), storage.IfMatch(v1))
	wantErr(t, "Put IfMatch(version from before the delete)", err, storage.ErrPreconditionFailed)
	// Re-created with the same bytes: a new version, but for content versions.
	if err := s.Delete(ctxT(t), key, storage.Condition{}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	v3 := mustPut(t, s, key, []byte("a"), storage.IfNotExists())
	if v3 == v1 && !o.ContentVersions {
		t.Fatalf("re-created key with the same bytes reused version %q", v1)
	}
	if v3 != v1 {
		_, err = s.Put(ctxT(t), key, []byte("d"), storage.IfMatch(v1))
		wantErr(t, "Put IfMatch(version from before the delete, same bytes)", err, storage.ErrPreconditionFailed)
	}
}

// testCreateOnceRace: 16 goroutines create one key; exactly one wins and
// its value is the one stored.
func testCreateOnceRace(t *testing.T, s *storage.Store) {
	const n = 16
	const key = "artifacts/once.json"
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		errs    [n]error
		vers    [n]storage.Version
		winners atomic.Int32
	)
	for i := range n {
		wg.Go(func() {
			<-start
			vers[i], errs[i] = s.Put(ctxT(t), key, []byte("writer-"+strconv.Itoa(i)), storage.IfNotExists())
			if errs[i] == nil {
				winners.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if w := winners.Load(); w != 1 {
		t.Fatalf("%d writers won a create-only race, want exactly 1 (errors: %v)", w, errs)
	}
	for i := range n {
		if errs[i] == nil {
			wantGet(t, s, key, []byte("writer-"+strconv.Itoa(i)), vers[i])
			continue
		}
		wantErr(t, "losing create", errs[i], storage.ErrPreconditionFailed)
	}
}

// testCASCounterRace: 8 goroutines each add 1 a hundred times with
// read/compare-and-swap; the counter must end at exactly 800 and exactly 800
// swaps must have succeeded.
func testCASCounterRace(t *testing.T, s *storage.Store) {
	const goroutines, increments = 8, 100
	const key = "counter"
	mustPut(t, s, key, []byte("0"), storage.IfNotExists())
	var wg sync.WaitGroup
	var successes, conflicts atomic.Int64
	errc := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for done := 0; done < increments; {
				b, v, err := s.Get(ctxT(t), key)
				if err != nil {
					errc <- err
					return
				}
				n, err := strconv.Atoi(string(b))
				if err != nil {
					errc <- fmt.Errorf("counter holds %q: %w", b, err)
					return
				}
				_, err = s.Put(ctxT(t), key, []byte(strconv.Itoa(n+1)), storage.IfMatch(v))
				switch {
				case err == nil:
					done++
					successes.Add(1)
				case errors.Is(err, storage.ErrPreconditionFailed):
					conflicts.Add(1)
				default:
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	b, _ := mustGet(t, s, key)
	if string(b) != strconv.Itoa(goroutines*increments) || successes.Load() != goroutines*increments {
		t.Fatalf("counter = %s after %d successful swaps, want %d", b, successes.Load(), goroutines*increments)
	}
	t.Logf("%d swaps, %d conflicts", successes.Load(), conflicts.Load())
}

func testListOrder(t *testing.T, s *storage.Store) {
	keys := []string{"a/2", "b", "a-b", "a/b/c", "a/1", "ab", "a/10", "A", "a/é", "a/z"}
	for _, k := range keys {
		mustPut(t, s, k, []byte(k), storage.Condition{})
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		{"", []string{"A", "a-b", "a/1", "a/10", "a/2", "a/b/c", "a/z", "a/é", "ab", "b"}},
		{"a/", []string{"a/1", "a/10", "a/2", "a/b/c", "a/z", "a/é"}},
		{"a", []string{"a-b", "a/1", "a/10", "a/2", "a/b/c", "a/z", "a/é", "ab"}},
		{"a/1", []string{"a/1", "a/10"}},
		{"a/b", []string{"a/b/c"}},
		{"a/b/c", []string{"a/b/c"}},
		{"a/b/", []string{"a/b/c"}},
		{"c", []string{}},
		{"a/x/", []string{}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, listAll(t, s, tc.prefix)); diff != "" {
			t.Errorf("List(%q) mismatch (-want +got):\n%s", tc.prefix, diff)
		}
	}
	for _, bad := range []string{"/a", "a//", "../", "a/../", "a\x00", "\xff"} {
		var gotErr error
		n := 0
		for _, err := range s.List(ctxT(t), bad) {
			n++
			gotErr = err
		}
		if n != 1 || !errors.Is(gotErr, storage.ErrInvalidKey) {
			t.Errorf("List(%q) yielded %d items, last error %v; want one ErrInvalidKey", bad, n, gotErr)
		}
	}
}

func testListStopsEarly(t *testing.T, s *storage.Store) {
	for i := range 5 {
		mustPut(t, s, fmt.Sprintf("stop/%d", i), nil, storage.Condition{})
	}
	var got []string
	for k, err := range s.List(ctxT(t), "stop/") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
		if len(got) == 2 {
			break
		}
	}
	if diff := cmp.Diff([]string{"stop/0", "stop/1"}, got); diff != "" {
		t.Fatalf("List with break (-want +got):\n%s", diff)
	}
	got = nil
	for k, err := range s.ListAfter(ctxT(t), "stop/", "stop/1") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
		break
	}
	if diff := cmp.Diff([]string{"stop/2"}, got); diff != "" {
		t.Fatalf("ListAfter with break (-want +got):\n%s", diff)
	}
}

// testListMany puts more keys than one S3 page (1,000) holds.
func testListMany(t *testing.T, s *storage.Store) {
	const n = 1234
	want := make([]string, n)
	for i := range n {
		want[i] = fmt.Sprintf("many/%05d.json", i)
	}
	mustPut(t, s, "many.json", nil, storage.Condition{}) // outside the prefix, sorts before it
	mustPut(t, s, "manz/0", nil, storage.Condition{})    // outside the prefix, sorts after it
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for _, k := range want {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := s.Put(ctxT(t), k, []byte(k), storage.IfNotExists()); err != nil {
				errc <- err
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	got := listAll(t, s, "many/")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("List of %d keys mismatch (-want +got):\n%s", n, diff)
	}
	// From a cursor, across the pages of every adapter (S3's 1,000,
	// memstore's 256), and from cursors outside the prefix.
	for _, tc := range []struct {
		after string
		want  []string
	}{
		{want[99], want[100:]},
		{want[n-11], want[n-10:]},
		{"many.json", want},
		{"manz", []string{}},
	} {
		got, err := collect(s.ListAfter(ctxT(t), "many/", tc.after))
		if err != nil {
			t.Fatalf("ListAfter(many/, %q): %v", tc.after, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ListAfter(many/, %q) of %d keys mismatch (-want +got):\n%s", tc.after, n, diff)
		}
	}
}

// collect drains a listing: its keys, or the error that ended it.
func collect(list func(func(string, error) bool)) ([]string, error) {
	keys := []string{}
	for k, err := range list {
		if err != nil {
			return keys, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// listAfterKeys are the keys ListAfter is checked over: neighbours in byte
// order of "a/" ('-' < '/' < 'b'), a folder "a/b/" among files, and a
// multi-byte name sorting after ASCII.
var listAfterKeys = []string{"A", "a-b", "a/1", "a/10", "a/2", "a/b/c", "a/b/d", "a/z", "a/é", "ab", "b"}

// listAfterCases is what ListAfter must yield over listAfterKeys.
var listAfterCases = []struct {
	name, prefix, after string
	want                []string
}{
	{"all from the start", "", "", listAfterKeys},
	{"prefix from the start", "a/", "", []string{"a/1", "a/10", "a/2", "a/b/c", "a/b/d", "a/z", "a/é"}},
	{"strictly after a stored key", "a/", "a/1", []string{"a/10", "a/2", "a/b/c", "a/b/d", "a/z", "a/é"}},
	{"after a key that starts another", "a/", "a/10", []string{"a/2", "a/b/c", "a/b/d", "a/z", "a/é"}},
	{"cursor not stored", "a/", "a/0", []string{"a/1", "a/10", "a/2", "a/b/c", "a/b/d", "a/z", "a/é"}},
	{"cursor is a folder name", "a/", "a/b", []string{"a/b/c", "a/b/d", "a/z", "a/é"}},
	{"cursor is a folder", "a/", "a/b/", []string{"a/b/c", "a/b/d", "a/z", "a/é"}},
	{"cursor inside a folder", "a/", "a/b/c", []string{"a/b/d", "a/z", "a/é"}},
	{"cursor last in a folder", "a/", "a/b/d", []string{"a/z", "a/é"}},
	{"cursor between ASCII and UTF-8", "a/", "a/zz", []string{"a/é"}},
	{"cursor at the last key", "a/", "a/é", []string{}},
	{"cursor before the prefix", "a/", "a", []string{"a/1", "a/10", "a/2", "a/b/c", "a/b/d", "a/z", "a/é"}},
	{"cursor a key before the prefix", "a/", "a-b", []string{"a/1", "a/10", "a/2", "a/b/c", "a/b/d", "a/z", "a/é"}},
	{"cursor far before the prefix", "a/", "A", []string{"a/1", "a/10", "a/2", "a/b/c", "a/b/d", "a/z", "a/é"}},
	{"cursor just past the prefix", "a/", "ab", []string{}},
	{"cursor far past the prefix", "a/", "b", []string{}},
	{"partial-segment prefix", "a", "a-b", []string{"a/1", "a/10", "a/2", "a/b/c", "a/b/d", "a/z", "a/é", "ab"}},
	{"partial-segment prefix, cursor in a folder", "a", "a/é", []string{"ab"}},
	{"folder prefix", "a/b/", "a/b/c", []string{"a/b/d"}},
	{"prefix ends mid-name", "a/1", "a/1", []string{"a/10"}},
	{"cursor before a mid-name prefix", "a/b", "a/a", []string{"a/b/c", "a/b/d"}},
	{"no prefix, cursor in a folder", "", "a/b/c", []string{"a/b/d", "a/z", "a/é", "ab", "b"}},
	{"no prefix, cursor at the last key", "", "b", []string{}},
	{"nothing under the prefix", "c", "", []string{}},
}

// listAfterMismatches puts listAfterKeys and checks ListAfter against
// listAfterCases and bad arguments; it reports what differs, so the
// suite's own tests can show it fails on a store that breaks the contract.
func listAfterMismatches(ctx context.Context, s *storage.Store) []string {
	for _, k := range listAfterKeys {
		if _, err := s.Put(ctx, k, []byte(k), storage.Condition{}); err != nil {
			return []string{fmt.Sprintf("Put(%q): %v", k, err)}
		}
	}
	var bad []string
	for _, tc := range listAfterCases {
		got, err := collect(s.ListAfter(ctx, tc.prefix, tc.after))
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: ListAfter(%q, %q): %v", tc.name, tc.prefix, tc.after, err))
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			bad = append(bad, fmt.Sprintf("%s: ListAfter(%q, %q) mismatch (-want +got):\n%s", tc.name, tc.prefix, tc.after, diff))
		}
	}
	for _, arg := range []struct{ prefix, after string }{
		{"/a", ""}, {"a//", "a/1"}, {"\xff", "a"},
		{"a/", "/a"}, {"a/", "a//"}, {"a/", "a/\xff"}, {"", "a\x00"},
	} {
		var errs []error
		n := 0
		for _, err := range s.ListAfter(ctx, arg.prefix, arg.after) {
			n++
			errs = append(errs, err)
		}
		if n != 1 || !errors.Is(errs[0], storage.ErrInvalidKey) {
			bad = append(bad, fmt.Sprintf("ListAfter(%q, %q) yielded %d items (errors %v); want one ErrInvalidKey", arg.prefix, arg.after, n, errs))
		}
	}
	return bad
}

func testListAfter(t *testing.T, s *storage.Store) {
	for _, m := range listAfterMismatches(ctxT(t), s) {
		t.Error(m)
	}
}

func testInvalidKeys(t *testing.T, s *storage.Store) {
	ctx := ctxT(t)
	for _, key := range storekey.InvalidKeys() {
		name := strconv.Quote(key)
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			_, _, err := s.Get(ctx, key)
			wantErr(t, "Get", err, storage.ErrInvalidKey)
			_, err = s.Put(ctx, key, []byte("x"), storage.Condition{})
			wantErr(t, "Put", err, storage.ErrInvalidKey)
			_, err = s.Put(ctx, key, []byte("x"), storage.IfNotExists())
			wantErr(t, "Put IfNotExists", err, storage.ErrInvalidKey)
			err = s.Delete(ctx, key, storage.Condition{})
			wantErr(t, "Delete", err, storage.ErrInvalidKey)
		})
	}
	if got := listAll(t, s, ""); len(got) != 0 {
		t.Fatalf("refused keys left objects behind: %q", got)
	}
}

// testUnusualValidKeys: keys that look odd but are valid must round-trip
// exactly and not alias each other.
func testUnusualValidKeys(t *testing.T, s *storage.Store) {
	keys := []string{
		"with space/file name.json",
		"ключ/значення.json",
		"..dots/x",
		"x..y/z",
		"colon:key/a:b",
		"a-b", "a.b", "a_b/c", "a/b", // neighbours of "a/" in byte order
		"idempotency/github:12345678-1234-1234-1234-123456789012.json",
		storekey.LongKey(),
	}
	for _, k := range keys {
		mustPut(t, s, k, []byte("v:"+k), storage.IfNotExists())
	}
	for _, k := range keys {
		wantGet(t, s, k, []byte("v:"+k), "")
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if diff := cmp.Diff(want, listAll(t, s, "")); diff != "" {
		t.Fatalf("List mismatch (-want +got):\n%s", diff)
	}
	if err := s.Delete(ctxT(t), "a/b", storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, s, "a/b")
	wantMissing(t, s, "a")
	wantGet(t, s, "a_b/c", []byte("v:a_b/c"), "")
	wantGet(t, s, "a.b", []byte("v:a.b"), "")
}

func testContextCanceled(t *testing.T, s *storage.Store) {
	const key = "ctx/k"
	v := mustPut(t, s, key, []byte("kept"), storage.Condition{})

	canceled, cancel := context.WithCancel(ctxT(t))
	cancel()
	expired, cancel2 := context.WithDeadline(ctxT(t), time.Now().Add(-time.Second))
	defer cancel2()

	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{canceled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		_, _, err := s.Get(c.ctx, key)
		wantErr(t, "Get", err, c.want)
		_, err = s.Put(c.ctx, key, []byte("overwritten"), storage.Condition{})
		wantErr(t, "Put", err, c.want)
		_, err = s.Put(c.ctx, "ctx/new", []byte("created"), storage.IfNotExists())
		wantErr(t, "Put IfNotExists", err, c.want)
		err = s.Delete(c.ctx, key, storage.Condition{})
		wantErr(t, "Delete", err, c.want)
		var listErr error
		for _, err := range s.List(c.ctx, "ctx/") {
			listErr = err
		}
		wantErr(t, "List", listErr, c.want)
		listErr = nil
		for _, err := range s.ListAfter(c.ctx, "ctx/", "ctx/a") {
			listErr = err
		}
		wantErr(t, "ListAfter", listErr, c.want)
	}
	wantGet(t, s, key, []byte("kept"), v)
	wantMissing(t, s, "ctx/new")
}

func testLargeValues(t *testing.T, s *storage.Store) {
	for _, size := range []int{5<<20 + 1, 8 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			big := make([]byte, size)
			_, _ = rand.Read(big)
			key := "big/" + strconv.Itoa(size)
			v1 := mustPut(t, s, key, big, storage.IfNotExists())
			wantGet(t, s, key, big, v1)
			big[0] ^= 0xff
			v2 := mustPut(t, s, key, big, storage.IfMatch(v1))
			wantGet(t, s, key, big, v2)
		})
	}
}

// benchValueSize is the value size the benchmarks write: a typical
// status.json.
const benchValueSize = 1 << 10

// BenchmarkStore measures Get, create-only Put and compare-and-swap Put on
// the stores newStore makes, each as a sub-benchmark (Get, Create,
// CASUpdate) so adapters report comparable figures.
func BenchmarkStore(b *testing.B, newStore func(b *testing.B) *storage.Store) {
	value := bytes.Repeat([]byte("x"), benchValueSize)
	b.Run("Get", func(b *testing.B) {
		s := newStore(b)
		ctx := b.Context()
		if _, err := s.Put(ctx, "bench/get", value, storage.Condition{}); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(benchValueSize)
		b.ResetTimer()
		for b.Loop() {
			if _, _, err := s.Get(ctx, "bench/get"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Create", func(b *testing.B) {
		s := newStore(b)
		ctx := b.Context()
		b.SetBytes(benchValueSize)
		i := 0
		for b.Loop() {
			i++
			if _, err := s.Put(ctx, "bench/create/"+strconv.Itoa(i), value, storage.IfNotExists()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("CASUpdate", func(b *testing.B) {
		s := newStore(b)
		ctx := b.Context()
		v, err := s.Put(ctx, "bench/cas", value, storage.Condition{})
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(benchValueSize)
		for b.Loop() {
			if v, err = s.Put(ctx, "bench/cas", value, storage.IfMatch(v)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkListAfter measures a ListAfter of the last 10 keys of a prefix
// holding n keys, in one folder, for each n in sizes (sub-benchmarks
// "keys=1000" and so on): the ratio of their ns/op says whether its cost
// follows what it yields (flat) or what it skips. Filling the prefix is
// not timed.
func BenchmarkListAfter(b *testing.B, newStore func(b *testing.B) *storage.Store, sizes ...int) {
	for _, n := range sizes {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			s, ctx := newStore(b), b.Context()
			key := func(i int) string { return fmt.Sprintf("bench/list/%08d", i) }
			sem := make(chan struct{}, 16)
			var wg sync.WaitGroup
			var failed atomic.Pointer[error]
			for i := range n {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					if _, err := s.Put(ctx, key(i), nil, storage.Condition{}); err != nil {
						failed.CompareAndSwap(nil, &err)
					}
				})
			}
			wg.Wait()
			if err := failed.Load(); err != nil {
				b.Fatal(*err)
			}
			after := key(n - 11)
			runtime.GC() // the fill's garbage is not the listing's cost
			b.ResetTimer()
			for b.Loop() {
				got, err := collect(s.ListAfter(ctx, "bench/list/", after))
				if err != nil {
					b.Fatal(err)
				}
				if len(got) != 10 {
					b.Fatalf("ListAfter yielded %d keys, want 10", len(got))
				}
			}
		})
	}
}
