package jobqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

var noopHandlers = jobqueue.Handlers{
	CallNotebookLM: func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: json.RawMessage(briefContent)}, nil
	},
}

// runJobs enqueues n jobs over agents agents and runs them to COMPLETE
// with workers goroutines claiming and running; it returns the time from
// the first enqueue to the last COMPLETE.
func runJobs(b *testing.B, s *storage.Store, n, agents, workers int) time.Duration {
	ctx := context.Background()
	q := newQueue(b, s, clock.Real())
	start := time.Now()
	var enq sync.WaitGroup
	per := (n + workers - 1) / workers
	for w := range workers {
		enq.Go(func() {
			for i := w * per; i < min(n, (w+1)*per); i++ {
				j := spec("job-"+strconv.Itoa(i), "agent-"+strconv.Itoa(i%agents))
				if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, j); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	enq.Wait()
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			id := "w" + strconv.Itoa(w)
			for done.Load() < int64(n) {
				c, err := q.Claim(ctx, id)
				if err != nil {
					b.Error(err)
					return
				}
				if c == nil {
					time.Sleep(100 * time.Microsecond)
					continue
				}
				j, err := c.Run(ctx, noopHandlers)
				if err != nil || j.Status != lifecycle.JobComplete {
					b.Errorf("%+v %v", j, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkJobsMemstore and BenchmarkJobsFilestore: jobs per second end
// to end (enqueue, claim, the pipeline with no-op handlers, artifact,
// COMPLETE, audit) with one Worker of `workers` slots over 256 agents,
// against the floor the store sets, measured in the same run: the rate at
// which the same number of goroutines make nothing but raw create-only
// puts of 512 bytes on the same kind of store, divided by the job's
// writes (counted on a calibration run first). jobs/floor is the share of
// the store's raw write rate the queue turns into jobs; writes/job is the
// calibration's (agents warm, refused writes not counted, the Worker's
// releases at its stop not counted: see writesPerJob). cpu-µs/job is the
// process's user and system CPU time (getrusage) over the jobs' run,
// enqueues and the Worker's stop included, divided by the jobs; allocs/job
// and B/job are the heap allocations over the same span (issue 22: on
// memstore that is the SDK's own cost per job, with no I/O).
func BenchmarkJobsMemstore(b *testing.B) {
	benchJobs(b, func(testing.TB) *storage.Store { return memstore.New() }, []int{1, 4, 16})
}

func BenchmarkJobsFilestore(b *testing.B) {
	benchJobs(b, fileStore, []int{16})
}

// BenchmarkJobsSQLite: the same on sqlitestore (WAL, synchronous=FULL,
// the group commit), the embedded default (issue 29).
func BenchmarkJobsSQLite(b *testing.B) {
	benchJobs(b, teststores.SQLite, []int{1, 4, 16})
}

func benchJobs(b *testing.B, newStore func(testing.TB) *storage.Store, slots []int) {
	for _, workers := range slots {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			const calib = 512
			cnt := countsPerJob(b, newStore(b), calib, 256, workers, noopHandlers)
			writes, commits := cnt.writes, cnt.commits
			s := newStore(b)
			b.ResetTimer()
			n := b.N
			cpu := startJobCost(b)
			var el time.Duration
			// The label lets a -cpuprofile be read for the jobs alone
			// (go tool pprof -tagfocus phase=jobs): the calibration and
			// the raw puts around them are in the same profile.
			pprof.Do(context.Background(), pprof.Labels("phase", "jobs"), func(context.Context) {
				el = runWorker(b, s, n, 256, workers, noopHandlers, nil)
			})
			cpu.report(n)
			b.StopTimer()
			jobRate := float64(n) / el.Seconds()
			raw := rawPutRate(newStore(b), max(2000, int(float64(n)*writes)), workers)
			if raw == 0 {
				b.Fatal("raw puts failed")
			}
			floor := raw / writes
			b.ReportMetric(jobRate, "jobs/s")
			b.ReportMetric(writes, "writes/job")
			b.ReportMetric(commits, "commits/job")
			b.ReportMetric(raw, "puts/s")
			b.ReportMetric(floor, "floor-jobs/s")
			b.ReportMetric(jobRate/floor, "jobs/floor")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// jobCost measures a benchmark's CPU time and heap allocations over a
// span of jobs.
type jobCost struct {
	b      *testing.B
	cpu    time.Duration
	allocs uint64
	bytes  uint64
}

func startJobCost(b *testing.B) jobCost {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return jobCost{b, processCPU(b), ms.Mallocs, ms.TotalAlloc}
}

func (c jobCost) report(n int) {
	used := processCPU(c.b) - c.cpu
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	c.b.ReportMetric(float64(used.Microseconds())/float64(n), "cpu-µs/job")
	c.b.ReportMetric(float64(ms.Mallocs-c.allocs)/float64(n), "allocs/job")
	c.b.ReportMetric(float64(ms.TotalAlloc-c.bytes)/float64(n), "B/job")
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rawPutRate is the rate at which workers goroutines create n distinct
// 512-byte objects (keys shaped like audit keys) in s: the store's own
// cost of a write, with no encoding or logic.
func rawPutRate(s *storage.Store, n, workers int) float64 {
	body := bytes.Repeat([]byte("x"), 512)
	return parallelRate(n, workers, func(i int64) error {
		key := "audit/20260224/20260224T100000.000000000Z-" + strconv.FormatInt(i, 10) + ".json"
		_, err := s.Put(context.Background(), key, body, storage.IfNotExists())
		return err
	})
}

// parallelRate runs op for i = 1..n on workers goroutines and returns the
// rate, in calls per second, or 0 if an op failed.
func parallelRate(n, workers int, op func(i int64) error) float64 {
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && !failed.Load(); i = next.Add(1) {
				if op(i) != nil {
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		return 0
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkJobsMinIO: jobs per second end to end on a real MinIO, and the
// raw conditional-PUT rate (If-None-Match: *, 1 KiB, same parallelism,
// straight through aws-sdk-go-v2) measured in the same run; their ratio is
// reported as jobs/put.
func BenchmarkJobsMinIO(b *testing.B) {
	client, bkt := env.Client(b)
	workers := 16
	// The raw rate first: workers goroutines creating distinct objects.
	body := bytes.Repeat([]byte("x"), 1024)
	prefix := fmt.Sprintf("raw-%d/", time.Now().UnixNano())
	putRate := parallelRate(2000, workers, func(i int64) error {
		_, err := client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bkt,
			Key: aws.String(prefix + strconv.FormatInt(i, 10)), Body: bytes.NewReader(body), IfNoneMatch: aws.String("*")})
		return err
	})
	if putRate == 0 {
		b.Fatal("raw PUTs failed")
	}
	b.ResetTimer()
	n := b.N
	el := runJobs(b, env.S3(b), n, 256, workers)
	jobRate := float64(n) / el.Seconds()
	b.ReportMetric(jobRate, "jobs/s")
	b.ReportMetric(putRate, "puts/s")
	b.ReportMetric(jobRate/putRate, "jobs/put")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkClaimNoWork: a Claim that finds nothing, on a queue whose
// agents all ran their jobs and are idle, on the production path: the clock
// moves (1 ms per Claim, as a polling Worker's would), so each agent's lock
// comes due for its orphan check every LeaseTTL/2 and the lanes are listed
// again, and the store is memstore. Its cost must not grow with the number
// of jobs that ever finished; with the clock moving it grows with agents
// only through those periodic checks (agents / (LeaseTTL/2) lock reads per
// ms).
func BenchmarkClaimNoWork(b *testing.B) {
	for _, agents := range []int{10, 10000} {
		b.Run(fmt.Sprintf("agents=%d", agents), func(b *testing.B) {
			ctx := context.Background()
			clk := clock.NewFake(t0)
			q := newQueue(b, stores[0].new(b), clk)
			for i := range agents {
				enqueue(b, q, "job-"+strconv.Itoa(i), "agent-"+strconv.Itoa(i))
			}
			for range agents {
				c := claim(b, q, "w")
				if c == nil {
					b.Fatal("a job was not claimed")
				}
				if _, err := c.Run(ctx, noopHandlers); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				clk.Advance(time.Millisecond)
				if c := claim(b, q, "w"); c != nil {
					b.Fatalf("claimed %s from an idle queue", c.Job().JobID)
				}
			}
		})
	}
}

// BenchmarkDispatch: enqueue→start of a job another Queue (another process,
// for all the Worker knows) enqueues on filestore, one job at a time, the
// Worker idle in between: "watch" learns of it at the store's signal
// (inotify), "poll" over the same store with its Watch hidden (as over S3)
// at its adaptive poll, the baseline of the same run. ns/op is the mean
// latency; p50-ms the median.
func BenchmarkDispatch(b *testing.B) {
	for _, mode := range []string{"watch", "poll"} {
		b.Run(mode, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var s *storage.Store = fileStore(b)
			producer := newQueue(b, s, clock.Real())
			if mode == "poll" {
				s = storage.New(struct{ driver.Store }{s})
			}
			started := make(chan time.Time, 1)
			h := jobqueue.Handlers{CallNotebookLM: func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
				started <- time.Now()
				return lifecycle.JobOutput{Content: json.RawMessage(briefContent)}, nil
			}}
			w := &jobqueue.Worker{Queue: newQueue(b, s, clock.Real()), ID: "w", Handlers: h, SweepInterval: -1}
			stopped := make(chan error, 1)
			go func() { stopped <- w.Run(ctx) }()
			var lat []time.Duration
			i := 0
			for b.Loop() {
				i++
				at := time.Now()
				enqueue(b, producer, "job-"+strconv.Itoa(i), "agent-"+strconv.Itoa(i%8))
				select {
				case st := <-started:
					lat = append(lat, st.Sub(at))
				case <-time.After(hangLimit):
					b.Fatalf("job-%d not started within %s", i, hangLimit)
				}
			}
			cancel()
			if err := <-stopped; err != nil {
				b.Fatal(err)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Millisecond), "p50-ms")
		})
	}
}

// BenchmarkPickupNoWatch: how long a job another Queue enqueued (on the
// same store, which cannot watch: the S3 path) waits before a Worker's
// handler starts it, under a steady stream of 100 jobs a second over 64
// agents; the op is one job, so -benchtime 1000x is a 10 s stream. The wait
// is from the enqueue's return (the job is in the store) to the handler's
// start; the first second of the stream is not counted, since the Worker
// starts idle and its first pickup waits up to PollInterval (1 s) by
// design. On memstore it measures the poll's schedule alone; on MinIO the
// store's calls too (docs/performance.md).
func BenchmarkPickupNoWatch(b *testing.B) {
	stores := []struct {
		name string
		new  func(testing.TB) *storage.Store
	}{
		{"memstore", func(testing.TB) *storage.Store { return storage.New(noWatch{memstore.New()}) }},
		{"minio", func(tb testing.TB) *storage.Store { return env.S3(tb) }},
	}
	for _, st := range stores {
		for _, rate := range []float64{100, 20} {
			b.Run(fmt.Sprintf("%s/%.0f-per-s", st.name, rate), func(b *testing.B) { benchPickup(b, st.new(b), rate) })
		}
	}
}

func benchPickup(b *testing.B, s *storage.Store, rate float64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newQueue := func(node string) *jobqueue.Queue {
		q, err := jobqueue.New(jobqueue.Config{Store: s, Node: node})
		if err != nil {
			b.Fatal(err)
		}
		return q
	}
	warm := int(rate) // the first second
	var mu sync.Mutex
	ready := map[string]time.Time{}
	var waits, enqueues []time.Duration
	done := make(chan struct{})
	h := jobqueue.Handlers{CallNotebookLM: func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
		now := time.Now()
		mu.Lock()
		if at, ok := ready[job.JobID]; ok {
			delete(ready, job.JobID)
			waits = append(waits, now.Sub(at))
			if len(waits) == b.N {
				close(done)
			}
		}
		mu.Unlock()
		return lifecycle.JobOutput{Content: json.RawMessage(briefContent)}, nil
	}}
	w := &jobqueue.Worker{Queue: newQueue("worker"), ID: "bench-worker", Slots: 16, Handlers: h}
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	enq := newQueue("enqueuer")
	b.ResetTimer()
	every := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := range warm + b.N {
		time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
		id := fmt.Sprintf("pickup-%d", i)
		// Stamped before the enqueue too, in case the job starts before
		// the stamp after it (then the wait counts the enqueue's own time).
		stamp := func() {
			if i >= warm {
				mu.Lock()
				ready[id] = time.Now()
				mu.Unlock()
			}
		}
		stamp()
		called := time.Now()
		if _, err := enq.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: id, RunID: "run_2026-02-24_abc123",
			JobType: lifecycle.JobBrief, AgentSlug: fmt.Sprintf("agent-%d", i%64)}); err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		if i >= warm {
			// The enqueue's own writes, as the store answered them at the
			// time: the share of the wait's tail that is the store's.
			enqueues = append(enqueues, time.Since(called))
		}
		if _, waiting := ready[id]; waiting {
			ready[id] = time.Now()
		}
		mu.Unlock()
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d jobs started within a minute of the last enqueue", len(waits), b.N)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	reportPickup(b, waits, enqueues)
}

// reportPickup reports benchPickup's percentiles of the waits for a worker
// and of the enqueues' own time, in milliseconds.
func reportPickup(b *testing.B, waits, enqueues []time.Duration) {
	slices.Sort(waits)
	slices.Sort(enqueues)
	pct := func(ds []time.Duration, p float64) float64 {
		return float64(ds[min(len(ds)-1, int(p*float64(len(ds))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(waits, 0.50), "p50-ms")
	b.ReportMetric(pct(waits, 0.99), "p99-ms")
	b.ReportMetric(pct(waits, 1), "max-ms")
	b.ReportMetric(pct(enqueues, 0.50), "enqueue-p50-ms")
	b.ReportMetric(pct(enqueues, 0.99), "enqueue-p99-ms")
	b.ReportMetric(0, "ns/op")
}
