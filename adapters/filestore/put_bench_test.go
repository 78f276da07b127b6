//go:build unix

package filestore_test

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/storetest"
)

// BenchmarkPut measures durable Puts of 512-byte values from several
// goroutines (8 on two cores), as a Worker's writers make them: Update
// rewrites a key of the goroutine's own with IfMatch of the version its
// last Put returned (a job's record), Create writes new keys into one
// directory with IfNotExists (a new job). Every Put is durable when it
// returns. Besides ns/op (mostly the disk's sync latency) it reports
// cpu-µs/op, the process's user and system CPU time per Put, which is
// what issue 22 reduces; its system-call counts come from running it
// under strace -f -c with a fixed -benchtime (see docs/performance.md).
func BenchmarkPut(b *testing.B) {
	b.Run("Update", func(b *testing.B) {
		s, err := openStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		var next atomic.Int64
		b.SetParallelism(4)
		cpu := startCPU(b)
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("jobs/j%03d.json", next.Add(1))
			v, err := s.Put(b.Context(), key, benchValue, storage.Condition{})
			if err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				if v, err = s.Put(b.Context(), key, benchValue, storage.IfMatch(v)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		cpu.report()
	})
	b.Run("Create", func(b *testing.B) {
		s, err := openStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Put(b.Context(), "jobs/first.json", benchValue, storage.Condition{}); err != nil {
			b.Fatal(err)
		}
		var next atomic.Int64
		b.SetParallelism(4)
		cpu := startCPU(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := fmt.Sprintf("jobs/n%08d.json", next.Add(1))
				if _, err := s.Put(b.Context(), key, benchValue, storage.IfNotExists()); err != nil {
					b.Error(err)
					return
				}
			}
		})
		cpu.report()
	})
}

// cpuClock measures the process's CPU time (user and system) over a
// benchmark's loop.
type cpuClock struct {
	b     *testing.B
	start time.Duration
}

func startCPU(b *testing.B) cpuClock {
	b.ResetTimer()
	return cpuClock{b, processCPU(b)}
}

func (c cpuClock) report() {
	used := processCPU(c.b) - c.start
	c.b.ReportMetric(float64(used.Microseconds())/float64(c.b.N), "cpu-µs/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkListAfter: the last 10 keys after 1k and 100k in one folder.
// On Linux the first listing indexes the folder and the others seek in the
// index; elsewhere each reads every name of the cursor's folder (see
// Store.ListAfter), though it neither stats nor sorts the skipped ones.
func BenchmarkListAfter(b *testing.B) {
	storetest.BenchmarkListAfter(b, func(b *testing.B) *storage.Store {
		s, err := openStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		return s.Store
	}, 1000, 100_000)
}
