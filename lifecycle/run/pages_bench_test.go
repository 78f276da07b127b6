package run_test

import (
	"context"
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

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
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
	doc := run.Status{RunID: id, AgentSlug: slug, Status: "completed", Trigger: "manual", StartedAt: at,
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
// MinIO (100k with CONVEYOR_BENCH_MINIO_100K=1: filling it takes minutes),
// and reports the store calls a page makes (requests on MinIO).
func BenchmarkRunsHistory(b *testing.B) {
	sizes := map[string][]int{"memstore": {1000, 100000, 1000000}, "filestore": {1000, 100000}, "minio": {1000, 10000}}
	if os.Getenv("CONVEYOR_BENCH_MINIO_100K") != "" {
		sizes["minio"] = append(sizes["minio"], 100000)
	}
	for _, kind := range []string{"memstore", "filestore", "minio"} {
		for _, n := range sizes[kind] {
			b.Run(fmt.Sprintf("%s/%s/FirstPage", kind, count(n)), func(b *testing.B) {
				store := historyStore(b, kind, n)
				counting := &teststores.Counting{Store: store}
				r, err := run.NewRunner(run.Config{Store: counting, Owner: "bench", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
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

// historyStore is a store of kind holding n finished runs of agent hist.
func historyStore(b *testing.B, kind string, n int) storage.Store {
	b.Helper()
	ctx := context.Background()
	switch kind {
	case "memstore":
		s := memstore.New()
		fillHistory(b, n, "hist", func(k string, v []byte) error { _, err := s.Put(ctx, k, v, storage.Condition{}); return err })
		return s
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
		s := env.S3(b)
		fillHistory(b, n, "hist", func(k string, v []byte) error { _, err := s.Put(ctx, k, v, storage.Condition{}); return err })
		return s
	}
}
