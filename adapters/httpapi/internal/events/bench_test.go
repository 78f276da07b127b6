package events_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// largeEnv enables the 100k-event histories of filestore and MinIO, whose
// filling and replay take minutes.
const largeEnv = "CONVEYOR_BENCH_LARGE"

// benchDay is the day the benchmarks' history is written on: n events
// spread over its first 20 hours, the feed's clock at 21:00.
var benchDay = time.Date(2026, 2, 24, 0, 0, 0, 0, time.UTC)

// BenchmarkFeedHistory measures the feed over an audit log of 1k, 100k and
// 1M events (all of one day, the worst case for a listing) on memstore,
// and 1k and 100k on filestore and MinIO (100k and 1M are left out under
// -short, 100k on filestore and MinIO unless CONVEYOR_BENCH_LARGE is set;
// MinIO is skipped without its binary, see miniotest):
//
//   - IdlePoll: one poll with nothing new (ns, B and allocs per poll;
//     requests/op are store round trips as S3 bills them, LIST pages of
//     1 000 keys included).
//   - Resume: a client resuming from the oldest event, streamed to its
//     end; the costs per event replayed (ns/event, B/event, requests/event)
//     and the time to its first event should not grow with the history,
//     and live-B, the heap the replay holds halfway through (after a GC,
//     over the heap before it), is what one client costs in memory.
//
// Run the polls at the default benchtime and the resumes once:
//
//	go test ./adapters/httpapi/events -run '^$' -bench 'FeedHistory/.*/IdlePoll'
//	go test ./adapters/httpapi/events -run '^$' -bench 'FeedHistory/.*/Resume' -benchtime 1x
func BenchmarkFeedHistory(b *testing.B) {
	type backend struct {
		name  string
		sizes []int
		open  func(b *testing.B) *storage.Store
	}
	backends := []backend{
		{"memstore", []int{1000, 100_000, 1_000_000}, func(*testing.B) *storage.Store { return memstore.New() }},
		{"filestore", []int{1000, 100_000}, func(b *testing.B) *storage.Store {
			s, err := filestore.New(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"minio", []int{1000, 100_000}, func(b *testing.B) *storage.Store { return env.S3(b) }},
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			for _, n := range be.sizes {
				b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
					if n > 1000 && testing.Short() {
						b.Skip("-short: the smallest history only")
					}
					if n > 1000 && be.name != "memstore" && os.Getenv(largeEnv) == "" {
						b.Skipf("set %s=1 for 100k events on filestore and MinIO (minutes)", largeEnv)
					}
					count := &teststores.Counting{Store: be.open(b)}
					ids := benchFill(b, storage.New(count), n)
					b.Run("IdlePoll", func(b *testing.B) { benchIdlePoll(b, count) })
					b.Run("Resume", func(b *testing.B) { benchResume(b, count, ids) })
					if be.name == "memstore" && n <= 100_000 {
						b.Run("Resume50", func(b *testing.B) { benchResumeMany(b, count, ids, 50, 2000) })
					}
				})
			}
		})
	}
}

// benchFeed is a feed on a fake clock at 21:00 on benchDay, replaying at
// full speed.
func benchFeed(b *testing.B, s *storage.Store) *events.Feed {
	b.Helper()
	f, err := events.New(events.Config{Store: s, Clock: clock.NewFake(benchDay.Add(21 * time.Hour)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ReplayRate: -1})
	if err != nil {
		b.Fatal(err)
	}
	return f
}

func benchIdlePoll(b *testing.B, count *teststores.Counting) {
	f := benchFeed(b, storage.New(count))
	ctx := b.Context()
	events.PollOnce(ctx, f) // the first: the window's events, none here
	runtime.GC()
	count.Reset()
	b.ReportAllocs()
	cpu := processCPU(b)
	for b.Loop() {
		events.PollOnce(ctx, f)
	}
	b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if k := count.Listed.Load(); k != 0 {
		b.Fatalf("idle polls listed %d keys", k)
	}
	b.ReportMetric(float64(count.PagedOps())/float64(b.N), "requests/op")
}

func benchResume(b *testing.B, count *teststores.Counting, ids []string) {
	f := benchFeed(b, storage.New(count))
	want := len(ids) - 1
	var first, gcCPU time.Duration
	var live uint64
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	base := m0.HeapAlloc
	count.Reset()
	cpu := processCPU(b)
	for b.Loop() {
		ctx, cancel := context.WithCancel(b.Context())
		w := &sink{h: http.Header{}, want: want, cancel: cancel, start: time.Now(), mid: func() {
			b.StopTimer()
			c0 := processCPU(b)
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			gcCPU += processCPU(b) - c0
			if ms.HeapAlloc > base {
				live = max(live, ms.HeapAlloc-base)
			}
			b.StartTimer()
		}}
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/events/stream", nil)
		req.Header.Set("Last-Event-ID", ids[0])
		f.ServeHTTP(w, req)
		cancel()
		if w.n != want {
			b.Fatalf("resume sent %d events, want %d", w.n, want)
		}
		first += w.first
	}
	cpu = processCPU(b) - cpu - gcCPU
	runtime.ReadMemStats(&m1)
	per := float64(b.N) * float64(want)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/event")
	b.ReportMetric(float64(cpu.Nanoseconds())/per, "cpu-ns/event")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/per, "B/event")
	b.ReportMetric(float64(count.PagedOps())/per, "requests/event")
	b.ReportMetric(float64(first.Nanoseconds())/float64(b.N), "ns-first-event")
	b.ReportMetric(float64(live), "live-B")
}

// benchResumeMany resumes clients streams at once, each from the event
// back events before the newest (or the oldest), and reports live-B, the heap they hold
// together when the first is halfway (after a GC, included in the time),
// and ns-first-event-max, the longest wait of a client for its first event.
func benchResumeMany(b *testing.B, count *teststores.Counting, ids []string, clients, back int) {
	f := benchFeed(b, storage.New(count))
	back = min(back, len(ids)-1)
	want := back
	last := ids[len(ids)-1-back]
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	base := m.HeapAlloc
	var live uint64
	var slowest time.Duration
	for b.Loop() {
		var once sync.Once
		var wg sync.WaitGroup
		sinks := make([]*sink, clients)
		for i := range sinks {
			ctx, cancel := context.WithCancel(b.Context())
			w := &sink{h: http.Header{}, want: want, cancel: cancel, start: time.Now(), mid: func() {
				once.Do(func() {
					var ms runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&ms)
					if ms.HeapAlloc > base {
						live = max(live, ms.HeapAlloc-base)
					}
				})
			}}
			sinks[i] = w
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/events/stream", nil)
			req.Header.Set("Last-Event-ID", last)
			wg.Go(func() { defer cancel(); f.ServeHTTP(w, req) })
		}
		wg.Wait()
		for _, w := range sinks {
			if w.n != want {
				b.Fatalf("a resume sent %d events, want %d", w.n, want)
			}
			slowest = max(slowest, w.first)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*clients*want), "ns/event")
	b.ReportMetric(float64(live), "live-B")
	b.ReportMetric(float64(live)/float64(clients), "live-B/client")
	b.ReportMetric(float64(slowest.Nanoseconds()), "ns-first-event-max")
}

// processCPU is the CPU time the process used so far: under a loaded
// machine, a steadier cost than the wall time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sink is a client of the stream that counts the events it receives and
// ends the request at the last one it waits for.
type sink struct {
	h       http.Header
	want    int
	n       int
	cancel  context.CancelFunc
	start   time.Time
	first   time.Duration
	mid     func() // called once, when half the events are in
	midDone bool
}

var idField = []byte("id: ")

func (s *sink) Header() http.Header { return s.h }
func (s *sink) WriteHeader(int)     {}
func (s *sink) FlushError() error   { return nil }
func (s *sink) Write(p []byte) (int, error) {
	if n := bytes.Count(p, idField); n > 0 {
		if s.n == 0 {
			s.first = time.Since(s.start)
		}
		s.n += n
		if !s.midDone && s.n >= s.want/2 {
			s.midDone = true
			s.mid()
		}
		if s.n >= s.want {
			s.cancel()
		}
	}
	return len(p), nil
}

// benchFill writes n job audit events over the first 20 hours of benchDay,
// 16 at a time, and returns their ids in order.
func benchFill(b *testing.B, s *storage.Store, n int) []string {
	b.Helper()
	step := 20 * time.Hour / time.Duration(n)
	ids := make([]string, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for i := range n {
		ts := benchDay.Add(time.Duration(i) * step)
		ev := lifecycle.AuditEvent{TS: ts, Event: "job.status.update", Actor: "orchestration-layer", Node: "bench",
			JobID: fmt.Sprintf("job-%d", i), From: "QUEUED", To: "CONTEXT_ASSEMBLY"}
		ev.ID = records.AuditEventID(ts, ev.JobID, 1, 0)
		ids[i] = ev.ID
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			raw, err := json.Marshal(ev)
			if err == nil {
				var key string
				if key, err = layout.AuditKey(ts, ev.ID); err == nil {
					_, err = s.Put(context.Background(), key, raw, storage.IfNotExists())
				}
			}
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return ids
}

// BenchmarkResumeHTTP300 is 300 clients on real connections on 127.0.0.1
// resuming at once from the oldest of 3,000 run events (each of its own
// run) and reading them all, at full speed (no ReplayRate): live-B is the
// most heap they held together (sampled every 250 ms after a collection),
// live-B/client that over 300. Run it once:
//
//	go test ./adapters/httpapi/events -run '^$' -bench ResumeHTTP300 -benchtime 1x
func BenchmarkResumeHTTP300(b *testing.B) {
	const clients, history = 300, 3000
	s := memstore.New()
	ids := fillRuns(b, s, time.Now().Add(-21*time.Hour), history)
	f, err := events.New(events.Config{Store: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxClients: -1, ReplayRate: -1})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ConnContext = events.ConnContext
	srv.Start()
	defer srv.Close()
	var peak uint64
	for b.Loop() {
		base := liveHeap()
		var wg sync.WaitGroup
		for range clients {
			c := stalled(b, srv.URL, ids[0])
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; n < history-1; {
					l, err := br.ReadSlice('\n')
					if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
						return
					}
					if bytes.HasPrefix(l, idField) {
						n++
					}
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for loop := true; loop; {
			select {
			case <-done:
				loop = false
			case <-time.After(250 * time.Millisecond):
				if h := liveHeap(); h > base {
					peak = max(peak, h-base)
				}
			}
		}
	}
	b.ReportMetric(float64(peak), "live-B")
	b.ReportMetric(float64(peak)/clients, "live-B/client")
}
