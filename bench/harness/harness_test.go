package harness_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/bench/harness"
)

// The harness's own test: every driver runs a handful of jobs through both
// modes, so the harness cannot rot while the SDK's API moves. Drivers whose
// server is not there skip with a message; scripts/bench.sh test starts
// Postgres and Redis and sets BENCH_PG_DSN and BENCH_REDIS_ADDR.
//
// This is a nested module: the SDK's `go test ./...` (and so .ci/run)
// does not run it.

func TestMain(m *testing.M) {
	// Latency re-executes the test binary as its enqueuing process.
	harness.MaybeChild()
	os.Exit(m.Run())
}

func dataDir(t *testing.T) string {
	if d := os.Getenv("BENCH_DIR"); d != "" {
		return d
	}
	return t.TempDir()
}

func drivers(t *testing.T) map[string]func(t *testing.T) harness.Driver {
	ctx := context.Background()
	return map[string]func(t *testing.T) harness.Driver{
		harness.NameMemstore:  func(t *testing.T) harness.Driver { return harness.NewMemstore() },
		harness.NameFilestore: func(t *testing.T) harness.Driver { return harness.NewFilestore(dataDir(t)) },
		harness.NameSQLite:    func(t *testing.T) harness.Driver { return harness.NewSQLite(dataDir(t)) },
		harness.NameMinIO: func(t *testing.T) harness.Driver {
			bin, err := harness.MinIOBinary()
			if err != nil {
				t.Skip(err)
			}
			m, err := harness.StartMinIO(ctx, bin, dataDir(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Stop() })
			return harness.NewMinIO(m)
		},
		harness.NameRiver:      riverDriver(harness.NameRiver),
		harness.NameRiverTuned: riverDriver(harness.NameRiverTuned),
		harness.NameAsynq: func(t *testing.T) harness.Driver {
			addr := os.Getenv("BENCH_REDIS_ADDR")
			if addr == "" {
				t.Skip("BENCH_REDIS_ADDR not set: run scripts/bench.sh test to start Redis")
			}
			d, err := harness.OpenAsynq(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	}
}

func riverDriver(name string) func(t *testing.T) harness.Driver {
	return func(t *testing.T) harness.Driver {
		dsn := os.Getenv("BENCH_PG_DSN")
		if dsn == "" {
			t.Skip("BENCH_PG_DSN not set: run scripts/bench.sh test to start Postgres")
		}
		// river-tuned batches through InsertManyFast, river through
		// InsertMany: both of River's batch paths are tried.
		d, err := harness.NewRiver(context.Background(), harness.RiverConfig{Name: name, DSN: dsn, PGData: os.Getenv("BENCH_PG_DATA"),
			InsertManyFast: name == harness.NameRiverTuned})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// hasServer are the systems whose server runs outside this process, so
// their CPU per job must include some server CPU.
var hasServer = map[string]bool{harness.NameMinIO: true, harness.NameRiver: true, harness.NameRiverTuned: true, harness.NameAsynq: true}

func TestDrivers(t *testing.T) {
	for name, open := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			d := open(t)
			t.Cleanup(func() { d.Close() })
			const jobs = 20
			// Twice one a call: the second measurement proves Reset leaves
			// the driver usable (asynq's client once forgot its queue after a
			// FLUSHALL); then in batches of 6 (the last call takes 2) where
			// the system has a batch insert.
			batches := []int{1, 1}
			if _, ok := d.(harness.Batcher); ok {
				batches = append(batches, 6)
			} else if _, err := harness.Throughput(ctx, d, harness.ThroughputConfig{Jobs: jobs, Agents: 4, Slots: 4, Enqueuers: 2,
				Batch: 6, Timeout: time.Minute}); err == nil {
				t.Fatal("batches accepted by a system without a batch insert")
			}
			for _, batch := range batches {
				res, err := harness.Throughput(ctx, d, harness.ThroughputConfig{Jobs: jobs, Agents: 4, Slots: 4, Enqueuers: 2,
					Batch: batch, Timeout: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if res.Batch != batch || res.Workers != 4 || res.Insert != harness.InsertCall(d, batch) || res.Insert == "none" {
					t.Fatalf("throughput at batch %d labelled batch %d, W %d, insert %q", batch, res.Batch, res.Workers, res.Insert)
				}
				if res.JobsPerSec <= 0 || res.Cost.Writes <= 0 {
					t.Fatalf("throughput: %+v", res)
				}
				// CPU per job (issue 22): present and positive for every
				// system, with a share of the server for those that have
				// one, and the parts adding up to it.
				if res.CPUPerJob <= 0 || res.CPUProcess <= 0 || res.CPUServer < 0 || (hasServer[name] != (res.CPUServer > 0)) ||
					res.CPUPerJob != (res.CPUProcess+res.CPUServer)/time.Duration(res.Jobs) {
					t.Fatalf("throughput: CPU per job %v = (process %v + server %v) / %d jobs (%s)",
						res.CPUPerJob, res.CPUProcess, res.CPUServer, res.Jobs, res.CPUError)
				}
				t.Logf("%s, %s ×%d: %.0f jobs/s, %.3g %s per job, CPU per job %v (process %v, server %v), %v", name, res.Insert, res.Batch,
					res.JobsPerSec, res.PerJob(res.Cost.Writes), res.WritesUnit, res.CPUPerJob, res.CPUProcess, res.CPUServer, res.Cost.Extra)
			}
			if _, ok := d.(harness.Floorer); ok {
				f, err := harness.Floor(ctx, d, 50, 4)
				if err != nil || f.JobsPerSec <= 0 {
					t.Fatalf("floor: %+v %v", f, err)
				}
			}
			if d.Addr() == "" {
				return // memstore: no other process can enqueue into it
			}
			lat, err := harness.Latency(ctx, d, harness.LatencyConfig{Jobs: jobs, Rate: 200, Slots: 4, Agents: 4})
			if err != nil {
				t.Fatal(err)
			}
			if lat.P50 <= 0 || lat.P99 < lat.P50 {
				t.Fatalf("latency: %+v", lat)
			}
			t.Logf("%s: enqueue→start from another process p50 %v p99 %v", name, lat.P50, lat.P99)
		})
	}
}

func TestPercentile(t *testing.T) {
	var xs []time.Duration
	for i := 1; i <= 100; i++ {
		xs = append(xs, time.Duration(i))
	}
	if p := harness.Percentile(xs, 0.5); p != 50 {
		t.Errorf("p50 = %v, want 50", p)
	}
	if p := harness.Percentile(xs, 0.99); p != 99 {
		t.Errorf("p99 = %v, want 99", p)
	}
	if p := harness.Percentile(xs[:1], 0.99); p != 1 {
		t.Errorf("p99 of one = %v, want 1", p)
	}
}
