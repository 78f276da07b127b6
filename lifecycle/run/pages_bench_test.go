package run_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// historyRun is the i-th of the finished runs fillHistory writes, a
// second apart from 2026-01-01: its status.json and the index entries its
// status writer would have left (history, and completed).
func historyRun(slug string, i int) (keys []string, status []byte) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
	id := fmt.Sprintf("run_%s_%010d", at.Format("2006-01-02_150405"), i)
	fin := at.Add(time.Second)
	doc := lifecycle.RunStatus{RunID: id, AgentSlug: slug, Status: "completed", Trigger: "manual", StartedAt: at,
		FinishedAt: &fin, StepsTotal: 1, StepsCompleted: 1, ProposalsCreated: []string{}}
	doc.Version = 4
	status, _ = json.Marshal(&doc)
	sk, _ := layout.RunStatusKey(slug, id)
	hk, _ := layout.RunHistoryKey(slug, at, id)
	ck, _ := layout.RunStatusIndexKey(slug, "completed", at, id)
	return []string{sk, hk, ck}, status
}

// fillHistory writes n finished runs of slug through put, from 8
// goroutines: the records and index keys directly, as a Runner would
// have left them, since running the Runner a million times would take
// hours. What the benchmark measures is the production read path.
func fillHistory(tb testing.TB, n int, slug string, put func(key string, value []byte) error) {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				keys, status := historyRun(slug, i)
				for j, k := range keys {
					v := status
					if j > 0 {
						v = nil
					}
					if err := put(k, v); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// BenchmarkRunsHistory reads the first page of an agent's runs (50, the
// default, newest first: GET /runs?agent=) over 1k, 100k and 1M finished
// runs on memstore, 1k and 100k on the directory store, and 1k and 10k on
// MinIO (100k with CONVEYOR_BENCH_LARGE=1, as the feed's benchmarks:
// MinIO writes its 300,000 objects in 2 to 10 minutes on a 2-core
// machine, by its load), and reports the store calls a page makes
// (requests on MinIO).
func BenchmarkRunsHistory(b *testing.B) {
	sizes := map[string][]int{"memstore": {1000, 100000, 1000000}, "filestore": {1000, 100000}, "minio": {1000, 10000}}
	if os.Getenv("CONVEYOR_BENCH_LARGE") != "" {
		sizes["minio"] = append(sizes["minio"], 100000)
	}
	var shared minioHistory
	for _, kind := range []string{"memstore", "filestore", "minio"} {
		for _, n := range sizes[kind] {
			b.Run(fmt.Sprintf("%s/%s/FirstPage", kind, count(n)), func(b *testing.B) {
				var store *storage.Store
				if kind == "minio" {
					store = shared.grow(b, n)
				} else {
					store = historyStore(b, kind, n)
				}
				counting := &teststores.Counting{Store: store}
				r, err := run.NewRunner(run.Config{Store: storage.New(counting), Owner: "bench", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
					run.Agent{Slug: "hist", Steps: []run.Step{okStep("a")}})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				// The fill's garbage is collected before the clock starts, so
				// a collection of it does not land on the pages measured.
				runtime.GC()
				b.ReportAllocs()
				cpu0 := cpuTime()
				b.ResetTimer()
				for b.Loop() {
					p, err := r.ListRuns(ctx, run.RunQuery{Agent: "hist"})
					if err != nil || len(p.Runs) != 50 || p.Next == "" {
						b.Fatalf("page of %d runs, next %q: %v", len(p.Runs), p.Next, err)
					}
				}
				b.ReportMetric(float64(counting.PagedOps())/float64(b.N), "storecalls/op")
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

func count(n int) string {
	switch {
	case n >= 1000000:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// historyStore is a store of kind (memstore or filestore) holding n
// finished runs of agent hist.
func historyStore(b *testing.B, kind string, n int) *storage.Store {
	b.Helper()
	ctx := context.Background()
	switch kind {
	case "filestore":
		// Plain files: the store reads a file written by another tool
		// (its version is then the content's), and writing them through
		// Put would pay an fsync each.
		dir := b.TempDir()
		fillHistory(b, n, "hist", func(k string, v []byte) error {
			p := filepath.Join(dir, filepath.FromSlash(k))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			return os.WriteFile(p, v, 0o644)
		})
		s, err := filestore.New(dir)
		if err != nil {
			b.Fatal(err)
		}
		return s
	default:
		s := memstore.New()
		fillHistory(b, n, "hist", func(k string, v []byte) error { _, err := s.Put(ctx, k, v, storage.Condition{}); return err })
		return s
	}
}

// minioHistory is the MinIO bucket prefix the sizes share, ascending: each
// size adds the runs the last one lacked (the runs are the same whatever
// the size, numbered from 0), so 1k, 10k and 100k cost 100k runs of
// filling, not 111k.
type minioHistory struct {
	store  *storage.Store
	prefix string
	n      int
	seq    int
}

// grow returns the shared MinIO store holding exactly n finished runs of
// agent hist, filling it up from what it holds (or afresh, under a new
// prefix, when it holds more), and logs how long the filling took.
func (h *minioHistory) grow(b *testing.B, n int) *storage.Store {
	b.Helper()
	if h.store == nil || h.n > n {
		h.seq++
		h.prefix = fmt.Sprintf("runs-history-%d/", h.seq)
		h.store, h.n = env.S3At(b, h.prefix), 0
	}
	start := time.Now()
	fillMinIO(b, h.prefix, h.n, n)
	if took := time.Since(start); n > h.n {
		objects := 3 * (n - h.n)
		b.Logf("filled runs %d..%d (%d objects) in %v: %.0f objects/s", h.n, n-1, objects, took.Round(time.Millisecond), float64(objects)/took.Seconds())
	}
	h.n = n
	return h.store
}

// fillMinIOBatch is how many runs one archive of fillMinIO carries (3
// objects each, about 5 KB of archive with their headers).
const fillMinIOBatch = 10000

// token is a write token as s3store's Put makes it: 16 random bytes in hex.
func token() string {
	var t [16]byte
	_, _ = rand.Read(t[:])
	return hex.EncodeToString(t[:])
}

// fillMinIO writes runs from..n-1 of agent hist under prefix as tar
// archives that MinIO unpacks into objects as it receives them (its
// "snowball" auto-extract, X-Amz-Meta-Snowball-Auto-Extract): one request
// per 10,000 runs instead of 30,000 PUTs. A PUT through the SDK costs this
// process about 1 ms of CPU besides MinIO's own 0.7 ms, which on 2 cores
// made 300,000 of them tens of minutes; unpacked, the client's share is
// 20 µs an object. Each object carries the write token and content type
// an s3store Put leaves (as PAX metadata), so a GET of it answers what it
// would after a Put; what is measured is plain S3.
func fillMinIO(b *testing.B, prefix string, from, n int) {
	b.Helper()
	client, bucket := env.Client(b)
	now := time.Now()
	var buf bytes.Buffer
	for lo := from; lo < n; lo += fillMinIOBatch {
		buf.Reset()
		tw := tar.NewWriter(&buf)
		for i := lo; i < min(n, lo+fillMinIOBatch); i++ {
			keys, status := historyRun("hist", i)
			for j, k := range keys {
				v := status
				if j > 0 {
					v = nil
				}
				hdr := &tar.Header{Typeflag: tar.TypeReg, Name: prefix + k, Size: int64(len(v)), Mode: 0o644,
					ModTime: now, Format: tar.FormatPAX,
					PAXRecords: map[string]string{
						"minio.metadata.X-Amz-Meta-Conveyor-Token": token(),
						"minio.metadata.Content-Type":              "application/octet-stream",
					}}
				if err := tw.WriteHeader(hdr); err != nil {
					b.Fatal(err)
				}
				if _, err := tw.Write(v); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := tw.Close(); err != nil {
			b.Fatal(err)
		}
		_, err := client.PutObject(context.Background(), &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(prefix + "fill.tar"),
			Body: bytes.NewReader(buf.Bytes()), ContentLength: aws.Int64(int64(buf.Len())),
			Metadata: map[string]string{"snowball-auto-extract": "true"},
		})
		if err != nil {
			b.Fatalf("filling runs %d..: %v", lo, err)
		}
	}
}
