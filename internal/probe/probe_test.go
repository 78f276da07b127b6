package probe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/internal/probe"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/internal/testkit/s3proxy"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

var minio miniotest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := minio.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping MinIO:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// broken is a memstore that breaks promises: each field drops one.
type broken struct {
	driver.Store
	createOnly    bool // Put ignores IfNotExists
	ifMatch       bool // Put ignores IfMatch
	notFound      bool // Put IfMatch on a missing key answers not found
	deleteIfMatch bool // Delete ignores IfMatch
	staleReads    bool // Get answers the first value it read of a key
	sameVersion   bool // every Put answers one version
	mu            sync.Mutex
	seen          map[string][]byte
}

func (b *broken) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	v, ver, err := b.Store.Get(ctx, key)
	if b.staleReads && err == nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		if old, ok := b.seen[key]; ok {
			return old, ver, nil
		}
		b.seen[key] = v
	}
	return v, ver, err
}

func (b *broken) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	switch {
	case b.createOnly && cond.Kind() == driver.CreateOnly, b.ifMatch && cond.Kind() == driver.MatchVersion:
		cond = storage.Condition{}
	case b.notFound && cond.Kind() == driver.MatchVersion:
		if _, _, err := b.Store.Get(ctx, key); errors.Is(err, storage.ErrNotFound) {
			return "", err
		}
	}
	v, err := b.Store.Put(ctx, key, value, cond)
	if b.sameVersion && err == nil {
		return "v", nil
	}
	return v, err
}

func (b *broken) Delete(ctx context.Context, key string, cond storage.Condition) error {
	if b.deleteIfMatch {
		cond = storage.Condition{}
	}
	return b.Store.Delete(ctx, key, cond)
}

// failedChecks are the checks err names as failed.
func failedChecks(err error) []string {
	var names []string
	var walk func(error)
	walk = func(err error) {
		var f *probe.Failure
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		} else if errors.As(err, &f) {
			names = append(names, f.Check)
		}
	}
	walk(err)
	return names
}

// left lists what the probe left under its prefix.
func left(t *testing.T, s *storage.Store) []string {
	t.Helper()
	var keys []string
	for k, err := range s.List(t.Context(), "probe/") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return keys
}

// TestRun: each broken promise fails its check, by name, and only that;
// a store that keeps them passes; nothing is left behind either way.
func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		store func(*storage.Store) *storage.Store
		want  []string
	}{
		{"memstore", func(s *storage.Store) *storage.Store { return s }, nil},
		{"create-only ignored", func(s *storage.Store) *storage.Store { return storage.New(&broken{Store: s, createOnly: true}) },
			[]string{probe.CreateOverExisting}},
		{"if-match ignored", func(s *storage.Store) *storage.Store { return storage.New(&broken{Store: s, ifMatch: true}) },
			[]string{probe.StaleIfMatch, probe.IfMatchMissing}},
		{"if-match on a missing key answers not found", func(s *storage.Store) *storage.Store { return storage.New(&broken{Store: s, notFound: true}) },
			[]string{probe.IfMatchMissing}},
		{"delete ignores its condition", func(s *storage.Store) *storage.Store { return storage.New(&broken{Store: s, deleteIfMatch: true}) },
			[]string{probe.DeleteConditions}},
		{"conditional headers dropped", func(s *storage.Store) *storage.Store {
			return storage.New(&broken{Store: s, createOnly: true, ifMatch: true, deleteIfMatch: true})
		}, []string{probe.CreateOverExisting, probe.StaleIfMatch, probe.IfMatchMissing, probe.DeleteConditions}},
		{"stale reads", func(s *storage.Store) *storage.Store {
			return storage.New(&broken{Store: s, staleReads: true, seen: map[string][]byte{}})
		},
			[]string{probe.ReadAfterWrite}},
		{"one version for every write", func(s *storage.Store) *storage.Store { return storage.New(&broken{Store: s, sameVersion: true}) },
			[]string{probe.ReadAfterWrite, probe.CreateOverExisting, probe.StaleIfMatch, probe.DeleteConditions}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem := memstore.New()
			err := probe.Run(t.Context(), tc.store(mem), probe.Config{})
			if got := failedChecks(err); !slices.Equal(got, tc.want) {
				t.Errorf("failed checks = %q, want %q (error: %v)", got, tc.want, err)
			}
			if (err != nil) != (tc.want != nil) || (err != nil && !errors.Is(err, probe.ErrFailed)) {
				t.Errorf("Run = %v, want an error matching ErrFailed: %v", err, tc.want != nil)
			}
			for _, name := range tc.want {
				if !strings.Contains(err.Error(), `"`+name+`"`) {
					t.Errorf("the error does not name %q: %v", name, err)
				}
			}
			if l := left(t, mem); len(l) > 0 {
				t.Errorf("the probe left %q", l)
			}
		})
	}
}

// unavailable fails every call as a store that cannot be reached.
type unavailable struct{ driver.Store }

var errDown = errors.New("connection refused")

func (unavailable) Put(ctx context.Context, key string, _ []byte, _ storage.Condition) (storage.Version, error) {
	return "", &storage.OpError{Op: "put", Key: key, Cause: errDown}
}

// TestRunUnreachable: a store that cannot be reached is no failed check
// (it does not match ErrFailed), and the error says which check could not
// run and why.
func TestRunUnreachable(t *testing.T) {
	t.Parallel()
	// Its failures are transient: retried until the Timeout.
	err := probe.Run(t.Context(), storage.New(unavailable{memstore.New()}), probe.Config{Timeout: 300 * time.Millisecond})
	if err == nil || errors.Is(err, probe.ErrFailed) || !errors.Is(err, errDown) {
		t.Fatalf("Run = %v, want the store's error, not ErrFailed", err)
	}
	if !strings.Contains(err.Error(), `"`+probe.ReadAfterWrite+`" could not run`) {
		t.Errorf("the error does not say which check could not run: %v", err)
	}
}

// cancelling cancels the probe's context at its n-th Put.
type cancelling struct {
	driver.Store
	cancel func()
	n      atomic.Int32
	at     int32
}

func (c *cancelling) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if c.n.Add(1) == c.at {
		c.cancel()
	}
	return c.Store.Put(ctx, key, value, cond)
}

// TestRunCleansUpWhenCanceled: a start canceled in the middle of the
// probe still removes the probe's keys.
func TestRunCleansUpWhenCanceled(t *testing.T) {
	t.Parallel()
	for _, at := range []int32{2, 4, 7} {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(t.Context())
		err := probe.Run(ctx, storage.New(&cancelling{Store: mem, cancel: cancel, at: at}), probe.Config{})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("canceled at Put %d: Run = %v, want context.Canceled", at, err)
		}
		if l := left(t, mem); len(l) > 0 {
			t.Errorf("canceled at Put %d: the probe left %q", at, l)
		}
	}
}

// TestRunRemovesStaleFolders: a folder a killed start left is removed once
// it is StaleAfter old; a younger one (another start probing now) and a
// folder of another name stay.
func TestRunRemovesStaleFolders(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	mem := memstore.New()
	old := "probe/" + now.Add(-probe.StaleAfter-time.Minute).Format("20060102T150405Z") + "-0a0b0c0d/stale-if-match"
	young := "probe/" + now.Add(-time.Minute).Format("20060102T150405Z") + "-01020304/stale-if-match"
	other := "probe/by-hand/x"
	for _, k := range []string{old, young, other} {
		if _, err := mem.Put(t.Context(), k, []byte("x"), storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := probe.Run(t.Context(), mem, probe.Config{Now: func() time.Time { return now }}); err != nil {
		t.Fatal(err)
	}
	if got, want := left(t, mem), []string{young, other}; !slices.Equal(got, want) {
		t.Errorf("left %q, want %q", got, want)
	}
}

// TestRunCost: the probe on the directory store and in memory takes a
// few milliseconds, so every start can afford it.
func TestRunCost(t *testing.T) {
	t.Parallel()
	fs, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	for _, s := range []struct {
		name  string
		store *storage.Store
	}{{"memstore", memstore.New()}, {"filestore", fs}} {
		start := time.Now()
		if err := probe.Run(t.Context(), s.store, probe.Config{}); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		took := time.Since(start)
		t.Logf("%s: %v", s.name, took)
		if took > 5*time.Second {
			t.Errorf("%s: the probe took %v", s.name, took)
		}
	}
}

// TestRunOnMinIO: MinIO passes; the same MinIO behind a proxy that drops
// the conditional headers fails the three checks that rest on them, by
// name (conditional deletes hold there: s3store checks them with a HEAD).
// Nothing is left in the bucket either way.
func TestRunOnMinIO(t *testing.T) {
	t.Parallel()
	srv := minio.Get(t)
	bucket, err := srv.CreateBucket(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	proxy := s3proxy.New(t, srv)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	open := func(endpoint string) *storage.Store {
		s, err := s3store.New(t.Context(), s3store.Config{Bucket: bucket, Endpoint: endpoint, Region: srv.Region, UsePathStyle: true,
			AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		endpoint string
		want     []string
	}{
		{"minio", srv.Endpoint, nil},
		{"headers stripped", proxy.Endpoint, []string{probe.CreateOverExisting, probe.StaleIfMatch, probe.IfMatchMissing}},
	} {
		s := open(tc.endpoint)
		start := time.Now()
		err := probe.Run(t.Context(), s, probe.Config{})
		t.Logf("%s: %v: %v", tc.name, time.Since(start), err)
		if got := failedChecks(err); !slices.Equal(got, tc.want) || (err != nil) != (tc.want != nil) {
			t.Errorf("%s: failed checks %q, want %q (error: %v)", tc.name, got, tc.want, err)
		}
		if l := left(t, open(srv.Endpoint)); len(l) > 0 {
			t.Errorf("%s: the probe left %q", tc.name, l)
		}
	}
}
