package filestore_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/storage"
)

// indexSize is a directory the listing index takes (indexMin is 1,000).
const indexSize = 1200

// fillDir writes n keys dir+"k00000".. straight into the directory, as
// another tool would (a file at a key without a stamp is a value all the
// same): much faster than n durable Puts, and the index sees only names.
func fillDir(t *testing.T, s *fsStore, dir string, n int) []string {
	t.Helper()
	path := filepath.Join(s.Root(), filepath.FromSlash(dir))
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, n)
	for i := range n {
		name := fmt.Sprintf("k%05d", i)
		if err := os.WriteFile(filepath.Join(path, name), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		keys[i] = dir + name
	}
	return keys
}

func collect(t *testing.T, s *storage.Store, prefix, after string) []string {
	t.Helper()
	var out []string
	for k, err := range s.ListAfter(t.Context(), prefix, after) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	return out
}

// truth lists through a new, closed Store, which reads the directories.
func truth(t *testing.T, root, prefix, after string) []string {
	t.Helper()
	s, err := openStore(root)
	if err != nil {
		t.Fatal(err)
	}
	// Closed, the Store never builds an index: its listings read the
	// directories, so the truth does not share the code under test.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return collect(t, s.Store, prefix, after)
}

func sameKeys(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %d keys, want %d\n got %s\nwant %s", what, len(got), len(want), head(got), head(want))
	}
}

func head(keys []string) string {
	if len(keys) > 8 {
		return fmt.Sprint(keys[:4], " ... ", keys[len(keys)-4:])
	}
	return fmt.Sprint(keys)
}

func newIndexedStore(t *testing.T) (*fsStore, []string) {
	t.Helper()
	s := newStore(t)
	t.Cleanup(func() { _ = s.Close() })
	keys := fillDir(t, s, "d/", indexSize)
	got := collect(t, s.Store, "d/", "d/k00100")
	sameKeys(t, "first listing", got, keys[101:])
	if st := filestore.IndexStatsForTest(s); st.Builds != 1 || st.Dirs != 1 {
		t.Fatalf("after a listing with a cursor inside %d entries: %+v, want one index", indexSize, st)
	}
	return s, keys
}

// TestIndexListings: listings served from an index yield what a read of
// the directory yields, for every kind of prefix and cursor around it.
func TestIndexListings(t *testing.T) {
	t.Parallel()
	s, _ := newIndexedStore(t)
	ctx := t.Context()
	// Some entries that are not plain keys of d/: a directory of keys (in
	// place of the key k00500, a name being a key or a directory, not
	// both), a write in progress, a symlink, a key of a sibling directory.
	if err := os.Remove(filepath.Join(s.Root(), "d", "k00500")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"d/k00500/x", "d/k00500/y", "d/m/z", "da/k1", "d/k01199zz"} {
		if _, err := s.Put(ctx, k, []byte("1"), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.Root(), "d", ".cnvtmp-zz"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("k00001", filepath.Join(s.Root(), "d", "link")); err != nil {
		t.Fatal(err)
	}
	served := filestore.IndexStatsForTest(s).Served
	cases := []struct{ prefix, after string }{
		{"d/", ""},
		{"d/", "d/"},
		{"d/", "d/k00100"},
		{"d/", "d/k00499"},
		{"d/", "d/k00500"},
		{"d/", "d/k00500/"},
		{"d/", "d/k00500/x"},
		{"d/", "d/k00500/y"},
		{"d/", "d/k01199"},
		{"d/", "d/k01199zz"},
		{"d/", "d/l"},
		{"d/", "d/zzz"},
		{"d/k0", "d/k00100"},
		{"d/k005", "d/k00100"},
		{"d/k005", "d/k00500/x"},
		{"d/k00500/", "d/k00500/x"},
		{"d/m", "d/k00100"},
		{"d", "d/k01000"},
		{"", "d/k01100"},
		{"", "c"},
		{"d/x", "d/x1"},
	}
	for _, tc := range cases {
		want := truth(t, s.Root(), tc.prefix, tc.after)
		got := collect(t, s.Store, tc.prefix, tc.after)
		sameKeys(t, fmt.Sprintf("ListAfter(%q, %q)", tc.prefix, tc.after), got, want)
	}
	// Every case but the one whose prefix lies below d/ walks d/.
	if st := filestore.IndexStatsForTest(s); st.Served-served != uint64(len(cases)-1) || st.Builds != 1 || st.Drops != 0 {
		t.Fatalf("index: %+v, want %d listings served by the one index", st, len(cases)-1)
	}
}

// TestIndexSeesOtherWriters: a key another Store (here, or in another
// process) wrote or deleted is in (or out of) the next listing served from
// the index, immediately after the write returned.
func TestIndexSeesOtherWriters(t *testing.T) {
	t.Parallel()
	s, keys := newIndexedStore(t)
	ctx := t.Context()
	other, err := openStore(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	want := slices.Clone(keys)
	for i := range 20 {
		// A new key, an overwrite, and a deletion, each seen by the next
		// listing.
		k := fmt.Sprintf("d/k%05d-new", i*50)
		if _, err := other.Put(ctx, k, []byte("x"), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
		if _, err := other.Put(ctx, keys[i*50+1], []byte("y"), storage.Condition{}); err != nil {
			t.Fatal(err)
		}
		del := keys[i*50+2]
		if err := other.Delete(ctx, del, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
		want = slices.DeleteFunc(want, func(x string) bool { return x == del })
		slices.Sort(want)
		sameKeys(t, fmt.Sprintf("after write %d", i), collect(t, s.Store, "d/", "d/k00000"), want[1:])
	}
	// A directory made and removed inside the indexed one.
	if _, err := other.Put(ctx, "d/sub/x", []byte("x"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, s.Store, "d/", "d/k01199"); !slices.Equal(got, []string{"d/sub/x"}) {
		t.Fatalf("after a new directory: %v", got)
	}
	if err := other.Delete(ctx, "d/sub/x", storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, s.Store, "d/", "d/k01199"); len(got) != 0 {
		t.Fatalf("after the directory was emptied and pruned: %v", got)
	}

	if testing.Short() {
		return
	}
	// Another process: the child Puts each key read from stdin and says
	// "ok" once its Put returned.
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), watchChildEnv+"="+s.Root())
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close() // the child exits at EOF
		_ = child.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	for i := range 10 {
		k := "d/k" + strconv.Itoa(90000+i)
		if _, err := fmt.Fprintln(stdin, k); err != nil {
			t.Fatal(err)
		}
		if !sc.Scan() || sc.Text() != "ok" {
			t.Fatalf("child: %q %v", sc.Text(), sc.Err())
		}
		if got := collect(t, s.Store, "d/", k[:len(k)-1]); !slices.Contains(got, k) {
			t.Fatalf("the other process's Put of %s returned, and the listing after it yields %v", k, got)
		}
	}
	if st := filestore.IndexStatsForTest(s); st.Builds != 1 || st.Drops != 0 {
		t.Fatalf("index: %+v, want the one index throughout", st)
	}
}

// TestIndexOverflow: an overflowed inotify queue (simulated, and real)
// drops the index, and the listing reads the directory: nothing written
// meanwhile is missed.
func TestIndexOverflow(t *testing.T) {
	t.Parallel()
	t.Run("simulated", func(t *testing.T) {
		t.Parallel()
		s, keys := newIndexedStore(t)
		other, err := openStore(s.Root())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Close() })
		overflow := true
		filestore.SetIndexOverflowForTest(s, func() bool {
			o := overflow
			overflow = false
			return o
		})
		if err := other.Delete(t.Context(), keys[1000], storage.Condition{}); err != nil {
			t.Fatal(err)
		}
		want := slices.Concat(keys[1:1000], keys[1001:])
		sameKeys(t, "after the overflow", collect(t, s.Store, "d/", keys[0]), want)
		st := filestore.IndexStatsForTest(s)
		if st.Overflows != 1 || st.Drops != 1 || st.Builds != 2 {
			t.Fatalf("index: %+v, want one overflow, the index dropped and built again", st)
		}
		sameKeys(t, "from the new index", collect(t, s.Store, "d/", keys[0]), want)
	})
	t.Run("real", func(t *testing.T) {
		t.Parallel()
		b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
		if err != nil {
			t.Skip(err)
		}
		limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || limit > 1<<17 {
			t.Skipf("max_queued_events %q: too many events to overflow in a test", b)
		}
		s, keys := newIndexedStore(t)
		// Another tool makes and removes a file, two events each time,
		// until the queue overflows; a key deleted and one written after
		// that are in no event.
		junk := filepath.Join(s.Root(), "d", "junk")
		for range limit/2 + 10 {
			if err := os.WriteFile(junk, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(junk); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Remove(filepath.Join(s.Root(), "d", "k00500")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(t.Context(), "d/k01000x", nil, storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
		want := slices.Concat(keys[1:500], keys[501:1001], []string{"d/k01000x"}, keys[1001:])
		sameKeys(t, "after the overflow", collect(t, s.Store, "d/", keys[0]), want)
		if st := filestore.IndexStatsForTest(s); st.Overflows != 1 || st.Builds != 2 {
			t.Fatalf("index: %+v, want the overflow seen and the index built again", st)
		}
	})
}

// TestIndexDirReplaced: the indexed directory removed and made again by
// another tool (so its watch still follows the old one while the Store
// holds it open) is read again.
func TestIndexDirReplaced(t *testing.T) {
	t.Parallel()
	s, _ := newIndexedStore(t)
	if err := os.RemoveAll(filepath.Join(s.Root(), "d")); err != nil {
		t.Fatal(err)
	}
	keys := fillDir(t, s, "d/", 3)
	sameKeys(t, "the new directory", collect(t, s.Store, "d/", "d/k00000"), keys[1:])
	if st := filestore.IndexStatsForTest(s); st.Drops != 1 || st.Dirs != 0 {
		t.Fatalf("index: %+v, want it dropped", st)
	}
	if err := os.RemoveAll(filepath.Join(s.Root(), "d")); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "no directory", collect(t, s.Store, "d/", "d/k00000"), nil)
}

// TestIndexDroppedMidListing: an index dropped while a listing is between
// two of its pages: the listing goes on from a read of the directory,
// after the last key it yielded, missing and repeating none.
func TestIndexDroppedMidListing(t *testing.T) {
	t.Parallel()
	s, keys := newIndexedStore(t)
	var got []string
	for k, err := range s.ListAfter(t.Context(), "d/", "d/k00000") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
		if len(got) == 300 {
			filestore.SetIndexOverflowForTest(s, func() bool { return true })
			collect(t, s.Store, "d/", "d/k01100") // drops the index
			filestore.SetIndexOverflowForTest(s, nil)
		}
	}
	sameKeys(t, "listing across the drop", got, keys[1:])
	if st := filestore.IndexStatsForTest(s); st.Overflows == 0 || st.Drops == 0 {
		t.Fatalf("index: %+v, want it dropped mid-listing", st)
	}
}

// TestIndexBounded: a Store indexes at most 4 directories, the least
// recently listed dropped first with its watch and descriptor; Close
// releases the rest, and the Store then lists by reading.
func TestIndexBounded(t *testing.T) {
	s := newStore(t)
	for i := range 6 {
		fillDir(t, s, fmt.Sprintf("d%d/", i), indexMin())
	}
	runtime.GC() // earlier tests' Stores release their descriptors when collected
	before, err := openFDs()
	if err != nil {
		t.Skip(err)
	}
	for i := range 6 {
		dir := fmt.Sprintf("d%d/", i)
		if got := collect(t, s.Store, dir, dir+"k00998"); len(got) != 1 {
			t.Fatalf("%s: %v", dir, got)
		}
	}
	st := filestore.IndexStatsForTest(s)
	if st.Builds != 6 || st.Drops != 2 || st.Dirs != 4 {
		t.Fatalf("index after 6 directories: %+v, want 4 kept", st)
	}
	during, err := openFDs()
	if err != nil {
		t.Fatal(err)
	}
	if during.inotify != 1 || during.total != before.total+5 {
		t.Fatalf("open descriptors: %+v before, %+v with 4 directories indexed (want one inotify instance and 4 directories more)", before, during)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := openFDs()
	if err != nil {
		t.Fatal(err)
	}
	if after.total != before.total || after.inotify != 0 {
		t.Fatalf("open descriptors: %+v before, %+v after Close", before, after)
	}
	if got := collect(t, s.Store, "d5/", "d5/k00998"); len(got) != 1 {
		t.Fatalf("after Close: %v", got)
	}
	if st := filestore.IndexStatsForTest(s); st.Dirs != 0 || st.Builds != 6 {
		t.Fatalf("index after Close: %+v, want none built", st)
	}
}

func indexMin() int { return filestore.IndexMinForTest }

// TestIndexConcurrent: listings from an index while other goroutines
// write and delete through another Store (for -race), and a listing after
// the writers returned yields exactly what a read of the directory does.
func TestIndexConcurrent(t *testing.T) {
	t.Parallel()
	s, keys := newIndexedStore(t)
	other, err := openStore(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	ctx := t.Context()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		wg.Go(func() {
			for i := range 40 {
				k := fmt.Sprintf("d/k%05d-%d", i*25, w)
				if _, err := other.Put(ctx, k, nil, storage.Condition{}); err != nil {
					t.Error(err)
					return
				}
				if err := other.Delete(ctx, keys[i*25+w], storage.Condition{}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var lists sync.WaitGroup
	for r := range 3 {
		lists.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				prev := ""
				for k, err := range s.ListAfter(ctx, "d/", keys[r*300]) {
					if err != nil {
						t.Error(err)
						return
					}
					if k <= prev {
						t.Errorf("listing out of order: %q after %q", k, prev)
						return
					}
					prev = k
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	lists.Wait()
	sameKeys(t, "after the writers", collect(t, s.Store, "d/", keys[0]), truth(t, s.Root(), "d/", keys[0]))
}

// TestIndexSizeHint: a directory whose size understates its entries is
// indexed by the listing that read it, for the next ones; one that
// overstates them is read under a watch once per listing, and not kept.
func TestIndexSizeHint(t *testing.T) {
	t.Parallel()
	t.Run("understated", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		filestore.SetIndexSizeHintForTest(s, 1<<40)
		keys := fillDir(t, s, "d/", indexMin())
		sameKeys(t, "first listing", collect(t, s.Store, "d/", keys[10]), keys[11:])
		if st := filestore.IndexStatsForTest(s); st.Builds != 1 || st.Served != 0 {
			t.Fatalf("index after the first listing: %+v, want built, not used", st)
		}
		sameKeys(t, "second listing", collect(t, s.Store, "d/", keys[10]), keys[11:])
		if st := filestore.IndexStatsForTest(s); st.Served != 1 {
			t.Fatalf("index after the second listing: %+v, want it used", st)
		}
	})
	t.Run("overstated", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		filestore.SetIndexSizeHintForTest(s, 0)
		keys := fillDir(t, s, "d/", 20)
		for range 2 {
			sameKeys(t, "listing", collect(t, s.Store, "d/", keys[10]), keys[11:])
			sameKeys(t, "listing with a prefix", collect(t, s.Store, "d/k0001", keys[10]), keys[11:20])
		}
		if st := filestore.IndexStatsForTest(s); st.Builds != 0 || st.Dirs != 0 {
			t.Fatalf("index: %+v, want none", st)
		}
	})
}
