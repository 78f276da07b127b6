package run_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// benchmarkRunner pushes b.N runs of three no-op steps through one Runner and
// reports runs per second and store round trips per run.
func benchmarkRunner(b *testing.B, store *storage.Store, concurrency int, tp ...trace.TracerProvider) {
	counting := &teststores.Counting{Store: store}
	done := make(chan string, 256)
	noop := func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{}, nil
	}
	agent := run.Agent{Slug: "bench", Concurrency: concurrency, Steps: []run.Step{
		{Name: "a", Run: noop}, {Name: "b", Run: noop}, {Name: "c", Run: noop}}}
	r, err := run.NewRunner(run.Config{Store: storage.New(counting), Owner: "bench",
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: finishSignal{Metrics: noMetrics{}, done: done}}, agent)
	if len(tp) > 0 {
		r, err = run.NewRunner(run.Config{Store: storage.New(counting), Owner: "bench", TracerProvider: tp[0],
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Metrics: finishSignal{Metrics: noMetrics{}, done: done}}, agent)
	}
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = r.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	for counting.Lists.Load() == 0 {
		time.Sleep(time.Millisecond) // the start-up poll
	}
	counting.Reset()
	b.ResetTimer()
	start := time.Now()
	go func() {
		for range b.N {
			if _, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "bench"}); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	for range b.N {
		if st := <-done; st != "completed" {
			b.Fatalf("run %s", st)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "runs/s")
	b.ReportMetric(float64(counting.Puts.Load())/n, "puts/run")
	b.ReportMetric(float64(counting.Deletes.Load())/n, "deletes/run")
	b.ReportMetric(float64(counting.Gets.Load())/n, "gets/run")
	b.ReportMetric(float64(counting.Lists.Load())/n, "lists/run")
}

func BenchmarkRunnerMemstore(b *testing.B) {
	for _, c := range []int{1, 8} {
		b.Run(map[int]string{1: "concurrency-1", 8: "concurrency-8"}[c], func(b *testing.B) {
			benchmarkRunner(b, memStore(b), c)
		})
	}
}

// BenchmarkRunnerTraced is BenchmarkRunnerMemstore/concurrency-1 with a
// TracerProvider that records every span (and exports none): the cost of
// tracing, against the untraced runs' allocations.
func BenchmarkRunnerTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	benchmarkRunner(b, memStore(b), 1, tp)
}

func BenchmarkRunnerMinIO(b *testing.B) {
	for _, c := range []int{1, 8} {
		b.Run(map[int]string{1: "concurrency-1", 8: "concurrency-8"}[c], func(b *testing.B) {
			benchmarkRunner(b, minioStore(b), c)
		})
	}
}
