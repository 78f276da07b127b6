//go:build unix

package filestore_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"

	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/storage"
)

func TestKernelAtLeast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		release string
		want    bool
	}{
		{"6.18.44-fc-v445", true},
		{"5.8.0", true},
		{"5.8", true},
		{"5.10.0-21-amd64", true},
		{"5.7.19", false},
		{"4.19.0", false},
		{"5", false},
		{"", false},
		{"garbage", false},
	} {
		if got := filestore.KernelAtLeastForTest(tc.release, 5, 8); got != tc.want {
			t.Errorf("kernelAtLeast(%q, 5, 8) = %v, want %v", tc.release, got, tc.want)
		}
	}
}

// TestGroupCommitShares: 32 concurrent writers share syncs (fewer batches
// than sync requests, and syncfs used), and every acknowledged write is
// there with its version. A lone writer's requests are synced one by one
// with fsync, as before group commit.
func TestGroupCommitShares(t *testing.T) {
	s := newStore(t)
	if !filestore.GroupCommitForTest(s) {
		t.Skip("no group commit on this system (needs Linux 5.8 or later)")
	}
	// Alone: the file, then its directory, each with fsync.
	before := filestore.SyncStatsForTest(s)
	if _, err := s.Put(t.Context(), "alone", []byte("v"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	after := filestore.SyncStatsForTest(s)
	if after.Fsyncs-before.Fsyncs != 2 || after.Syncfs != before.Syncfs || after.Batches-before.Batches != 2 {
		t.Fatalf("a lone Put: %+v then %+v; want two batches of one fsync each", before, after)
	}

	const writers, each = 32, 10
	var wg sync.WaitGroup
	start := make(chan struct{})
	vers := make([][each]storage.Version, writers)
	errc := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			<-start
			for i := range each {
				v, err := s.Put(t.Context(), fmt.Sprintf("gc/%02d/%d", w, i), []byte(fmt.Sprint(w, i)), storage.IfNotExists())
				if err != nil {
					errc <- err
					return
				}
				vers[w][i] = v
			}
		})
	}
	close(start)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for w := range writers {
		for i := range each {
			wantValue(t, s.Store, fmt.Sprintf("gc/%02d/%d", w, i), fmt.Sprint(w, i), vers[w][i])
		}
	}
	st := filestore.SyncStatsForTest(s)
	st.Requests -= after.Requests
	st.Batches -= after.Batches
	st.Syncfs -= after.Syncfs
	t.Logf("%d writes: %d sync requests in %d batches, %d of them one syncfs", writers*each, st.Requests, st.Batches, st.Syncfs)
	if st.Syncfs == 0 || st.Batches >= st.Requests {
		t.Fatalf("%d concurrent writers shared no sync: %+v", writers, st)
	}
}

func wantValue(t *testing.T, s *storage.Store, key, value string, version storage.Version) {
	t.Helper()
	b, v, err := s.Get(t.Context(), key)
	if err != nil || string(b) != value || (version != "" && v != version) {
		t.Fatalf("Get(%q) = %q %q %v; want %q at %q", key, b, v, err, value, version)
	}
}

// failingSyncs replaces a Store's syncs with ones that fail with EIO while
// told to: files, directories or both.
type failingSyncs struct {
	files, dirs atomic.Bool
}

func (f *failingSyncs) install(s *fsStore) {
	filestore.SetSyncForTest(s, func(root int) error {
		if f.files.Load() || f.dirs.Load() {
			return syscall.EIO
		}
		return filestore.RealSyncfs(root)
	}, func(fd int) error {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return err
		}
		dir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR
		if dir && f.dirs.Load() || !dir && f.files.Load() {
			return syscall.EIO
		}
		return filestore.RealFsync(fd)
	})
}

// TestSyncFailure: a write whose data cannot be made durable fails and
// leaves the key as it was; one whose rename cannot be made durable fails
// with ErrOutcomeUnknown; and a write in flight while any sync fails fails
// too, because syncfs reports a lost page once, possibly to another batch.
func TestSyncFailure(t *testing.T) {
	s := newStore(t)
	var f failingSyncs
	f.install(s)
	var inFlight atomic.Bool // the hook below fails another write's sync
	filestore.SetAfterRenameForTest(s, func(key string) {
		if key != "flight" || !inFlight.Load() {
			return
		}
		f.files.Store(true)
		_, err := s.Put(t.Context(), "other", []byte("x"), storage.Condition{})
		f.files.Store(false)
		if err == nil {
			t.Error("Put with a failing sync succeeded")
		}
	})
	ctx := t.Context()
	v1, err := s.Put(ctx, "k", []byte("one"), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}

	f.files.Store(true)
	_, err = s.Put(ctx, "k", []byte("two"), storage.IfMatch(v1))
	f.files.Store(false)
	if err == nil || errors.Is(err, storage.ErrOutcomeUnknown) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Put whose data sync failed = %v; want EIO, not ErrOutcomeUnknown", err)
	}
	wantValue(t, s.Store, "k", "one", v1)
	if tmp, _ := filepath.Glob(filepath.Join(s.Root(), ".cnvtmp-*")); len(tmp) != 0 {
		t.Fatalf("failed write left %q", tmp)
	}

	f.dirs.Store(true)
	_, err = s.Put(ctx, "k", []byte("three"), storage.IfMatch(v1))
	f.dirs.Store(false)
	if !errors.Is(err, storage.ErrOutcomeUnknown) {
		t.Fatalf("Put whose rename could not be synced = %v; want ErrOutcomeUnknown", err)
	}
	b, v3, err := s.Get(ctx, "k")
	if err != nil || string(b) != "three" {
		t.Fatalf("after an unknown outcome: %q %v; the renamed value is visible", b, err)
	}

	inFlight.Store(true)
	_, err = s.Put(ctx, "flight", []byte("f"), storage.Condition{})
	inFlight.Store(false)
	if !errors.Is(err, storage.ErrOutcomeUnknown) {
		t.Fatalf("Put in flight while another sync failed = %v; want ErrOutcomeUnknown", err)
	}

	// Syncs work again: so do writes.
	if _, err := s.Put(ctx, "k", []byte("four"), storage.IfMatch(v3)); err != nil {
		t.Fatalf("Put after the failures: %v", err)
	}
	if err := s.Delete(ctx, "flight", storage.Condition{}); err != nil {
		t.Fatal(err)
	}
}

// benchValue is the measurement: 512-byte files.
var benchValue = bytes.Repeat([]byte("x"), 512)

// BenchmarkGroupCommit measures create-only Puts of 512-byte values by
// 1, 8, 32 and 128 concurrent writers, each to keys of its own, with group
// commit and, in the same iteration, with PerWriteSync (every write pays
// its own fsync and directory fsync: the baseline). The two modes take
// turns in eight rounds, so that load from other processes on the machine
// falls on both alike. It reports both rates, their ratio, and each mode's
// mean latency per write.
func BenchmarkGroupCommit(b *testing.B) {
	for _, writers := range []int{1, 8, 32, 128} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			var stores [2]*fsStore
			for i, opts := range [][]filestore.Option{{filestore.PerWriteSync()}, nil} {
				s, err := openStore(b.TempDir(), opts...)
				if err != nil {
					b.Fatal(err)
				}
				stores[i] = s
			}
			if !filestore.GroupCommitForTest(stores[1]) {
				b.Skip("no group commit on this system")
			}
			const rounds = 8
			var took [2]time.Duration
			var next [2]int
			for r := range rounds {
				n := b.N*(r+1)/rounds - b.N*r/rounds
				for i, s := range stores {
					took[i] += concurrentPuts(b, s, writers, next[i], n)
					next[i] += n
				}
			}
			perWrite := float64(b.N) / took[0].Seconds()
			group := float64(b.N) / took[1].Seconds()
			b.ReportMetric(perWrite, "perwrite-writes/s")
			b.ReportMetric(group, "group-writes/s")
			b.ReportMetric(group/perWrite, "ratio")
			st := filestore.SyncStatsForTest(stores[1])
			b.ReportMetric(float64(st.Requests)/float64(st.Batches), "group-syncs/batch")
			b.ReportMetric(float64(took[0].Microseconds())*float64(writers)/float64(b.N), "perwrite-µs/write")
			b.ReportMetric(float64(took[1].Microseconds())*float64(writers)/float64(b.N), "group-µs/write")
		})
	}
}

// concurrentPuts writes n values, numbered from first, with writers
// goroutines and returns how long that took.
func concurrentPuts(b *testing.B, s *fsStore, writers, first, n int) time.Duration {
	var next atomic.Int64
	next.Store(int64(first))
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(first+n) {
					return
				}
				key := fmt.Sprintf("bench/w%03d/%d.json", w, i)
				if _, err := s.Put(b.Context(), key, benchValue, storage.IfNotExists()); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return took
}

// keysUnder lists prefix, failing the test on an error.
func keysUnder(t *testing.T, s *storage.Store, prefix string) []string {
	t.Helper()
	var keys []string
	for k, err := range s.List(t.Context(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return keys
}
