package storetest_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSuiteOnMemstore runs the suite against the simplest adapter, so a
// change to the suite is checked even without the adapters' own packages.
func TestSuiteOnMemstore(t *testing.T) {
	storetest.TestDriver(t, func(*testing.T) driver.Store { return memstore.NewDriver() }, storetest.Capabilities{})
}

// TestSuiteOnContentVersions runs the suite, with ContentVersions, against
// a store whose versions are the MD5 of the bytes, as S3's ETags are: the
// suite's content-version paths are checked without a MinIO server.
func TestSuiteOnContentVersions(t *testing.T) {
	storetest.TestDriver(t, func(*testing.T) driver.Store { return &md5Store{Store: memstore.NewDriver()} }, storetest.Capabilities{ContentVersions: true})
}

// md5Store is a memstore driver whose versions are the MD5 of the stored bytes.
// One mutex makes its read-compare-write conditions atomic.
type md5Store struct {
	driver.Store
	mu sync.Mutex
}

func md5Version(b []byte) storage.Version {
	sum := md5.Sum(b)
	return storage.Version(hex.EncodeToString(sum[:]))
}

func (m *md5Store) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, _, err := m.Store.Get(ctx, key)
	if err != nil {
		return nil, "", err
	}
	return b, md5Version(b), nil
}

// current is the key's version, "" when missing; m.mu is held.
func (m *md5Store) current(ctx context.Context, key string) (storage.Version, error) {
	b, _, err := m.Store.Get(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	}
	return md5Version(b), nil
}

func (m *md5Store) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, err := m.current(ctx, key)
	if err != nil {
		return "", err
	}
	if !cond.Holds(cur) {
		return "", &storage.OpError{Op: "put", Key: key, Kind: storage.ErrPreconditionFailed}
	}
	if _, err := m.Store.Put(ctx, key, value, storage.Condition{}); err != nil {
		return "", err
	}
	return md5Version(value), nil
}

func (m *md5Store) Delete(ctx context.Context, key string, cond storage.Condition) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, err := m.current(ctx, key)
	if err != nil {
		return err
	}
	if cond.Kind() == driver.MatchVersion && !cond.Holds(cur) {
		return &storage.OpError{Op: "delete", Key: key, Kind: storage.ErrPreconditionFailed}
	}
	return m.Store.Delete(ctx, key, storage.Condition{})
}

// TestRegisterModelRejects proves the linearizability model can fail: it
// must refuse a stale read, a lost compare-and-swap that "succeeded", and a
// write that kept the old version (the ABA trap).
func TestRegisterModelRejects(t *testing.T) {
	type op = porcupine.Operation
	put := func(c int, v, ver string, call, ret int64) op {
		return op{ClientId: c, Input: storetest.RegInputForTest("put", v, ""), Output: storetest.RegOutputForTest("ok", "", ver), Call: call, Return: ret}
	}
	get := func(c int, v, ver string, call, ret int64) op {
		return op{ClientId: c, Input: storetest.RegInputForTest("get", "", ""), Output: storetest.RegOutputForTest("ok", v, ver), Call: call, Return: ret}
	}
	cas := func(c int, v, expect, res, ver string, call, ret int64) op {
		return op{ClientId: c, Input: storetest.RegInputForTest("cas", v, expect), Output: storetest.RegOutputForTest(res, "", ver), Call: call, Return: ret}
	}
	tests := []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"sequential ok", []op{put(0, "a", "v1", 0, 1), get(1, "a", "v1", 2, 3), cas(0, "b", "v1", "ok", "v2", 4, 5), get(1, "b", "v2", 6, 7)}, porcupine.Ok},
		{"concurrent read may see either", []op{put(0, "a", "v1", 0, 1), put(0, "b", "v2", 2, 5), get(1, "a", "v1", 3, 4)}, porcupine.Ok},
		{"stale read", []op{put(0, "a", "v1", 0, 1), put(0, "b", "v2", 2, 3), get(1, "a", "v1", 4, 5)}, porcupine.Illegal},
		{"two cas from one version", []op{put(0, "a", "v1", 0, 1), cas(0, "b", "v1", "ok", "v2", 2, 3), cas(1, "c", "v1", "ok", "v3", 4, 5)}, porcupine.Illegal},
		{"failed cas that should succeed", []op{put(0, "a", "v1", 0, 1), cas(0, "b", "v1", "pf", "", 2, 3)}, porcupine.Illegal},
		{"rewrite kept version", []op{put(0, "a", "v1", 0, 1), put(0, "a", "v1", 2, 3)}, porcupine.Illegal},
	}
	for _, tc := range tests {
		if got := storetest.CheckRegisterHistoryForTest(tc.ops, 10*time.Second); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestLinearizabilityVerdict proves the suite's verdict can fail: on an
// illegal history, and on one porcupine cannot decide in time (Unknown),
// which proves nothing and must not pass.
func TestLinearizabilityVerdict(t *testing.T) {
	t.Parallel()
	op := func(c int, in, out any, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: in, Output: out, Call: call, Return: ret}
	}
	// hard: n writes that all overlap, then a read of a value none of them
	// wrote. Illegal, but porcupine can say so only after trying every
	// order of the writes (2^n subsets), far longer than a millisecond.
	hard := func(n int) []porcupine.Operation {
		ops := make([]porcupine.Operation, 0, n+1)
		for i := range n {
			v := fmt.Sprintf("w%d", i)
			ops = append(ops, op(i, storetest.RegInputForTest("put", v, ""), storetest.RegOutputForTest("ok", "", "v-"+v), 0, 100))
		}
		return append(ops, op(n, storetest.RegInputForTest("get", "", ""), storetest.RegOutputForTest("ok", "never", "v-never"), 101, 102))
	}
	put := func(v, ver string, call, ret int64) porcupine.Operation {
		return op(0, storetest.RegInputForTest("put", v, ""), storetest.RegOutputForTest("ok", "", ver), call, ret)
	}
	get := func(v, ver string, call, ret int64) porcupine.Operation {
		return op(1, storetest.RegInputForTest("get", "", ""), storetest.RegOutputForTest("ok", v, ver), call, ret)
	}
	tests := []struct {
		name    string
		ops     []porcupine.Operation
		timeout time.Duration
		wantErr string // "" for a pass
	}{
		{"linearizable", []porcupine.Operation{put("a", "v1", 0, 1), get("a", "v1", 2, 3)}, 10 * time.Second, ""},
		{"illegal", []porcupine.Operation{put("a", "v1", 0, 1), put("b", "v2", 2, 3), get("a", "v1", 4, 5)}, 10 * time.Second, "not linearizable"},
		{"timed out", hard(40), time.Millisecond, "not proven"},
	}
	for _, tc := range tests {
		err := storetest.CheckHistoryForTest(tc.ops, tc.timeout)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want a pass", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.wantErr)
		}
	}
}

// brokenLister is a memstore driver whose ListAfter keeps, of the keys
// it has for the prefix, those keep allows: one defect per store. (A
// driver accepting a bad cursor is no defect a store can have: the Store
// refuses one before its driver is asked; package storage tests that.)
type brokenLister struct {
	driver.Store
	keep func(after, key string) bool
}

func (b brokenLister) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for k, err := range b.Store.ListAfter(ctx, prefix, "") {
			if err == nil && !b.keep(after, k) {
				continue
			}
			if !yield(k, err) {
				return
			}
		}
	}
}

// TestListAfterCheckFails proves the ListAfter subtest can fail: on each
// store below, with one defect, it reports a mismatch; on memstore none.
func TestListAfterCheckFails(t *testing.T) {
	t.Parallel()
	folder := func(k string) string { return k[:strings.LastIndexByte(k, '/')+1] }
	broken := func(keep func(a, k string) bool) *storage.Store {
		return storage.New(brokenLister{memstore.NewDriver(), keep})
	}
	tests := []struct {
		name  string
		store *storage.Store
		want  bool // mismatches expected
	}{
		{"memstore", memstore.New(), false},
		{"includes the cursor", broken(func(a, k string) bool { return k >= a }), true},
		{"ignores the cursor", broken(func(a, k string) bool { return true }), true},
		// a directory walk that skips every folder sorting before the
		// cursor, even the one the cursor is in
		{"skips the cursor's folder", broken(func(a, k string) bool {
			return k > a && (a == "" || folder(k) == "" || folder(k) > a)
		}), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := storetest.ListAfterMismatchesForTest(t.Context(), tc.store)
			if (len(got) > 0) != tc.want {
				t.Errorf("mismatches = %q, want some: %v", got, tc.want)
			}
		})
	}
}

// checkThenDelete is a memstore whose conditional Delete reads the
// version, waits a moment, then deletes whatever is there: MinIO's HEAD
// then DELETE, with the window made wide.
type checkThenDelete struct{ driver.Store }

func (c checkThenDelete) Delete(ctx context.Context, key string, cond storage.Condition) error {
	if cond.Kind() == driver.MatchVersion {
		_, v, err := c.Store.Get(ctx, key)
		if err != nil || v != cond.Version() {
			return &storage.OpError{Op: "delete", Key: key, Kind: storage.ErrPreconditionFailed, Cause: err}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return c.Store.Delete(ctx, key, storage.Condition{})
}

// TestConditionalDeleteCheckFails proves the ConditionalDeleteIsAtomic
// check can fail: a check-then-delete store breaks rounds, memstore none.
func TestConditionalDeleteCheckFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store *storage.Store
		want  bool
	}{
		{"memstore", memstore.New(), false},
		{"check then delete", storage.New(checkThenDelete{memstore.NewDriver()}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bad, err := storetest.ConditionalDeleteRacesForTest(t.Context(), tc.store, 40)
			if err != nil {
				t.Fatal(err)
			}
			if (len(bad) > 0) != tc.want {
				t.Errorf("broken rounds = %q, want some: %v", bad, tc.want)
			}
		})
	}
}
