//go:build unix

package sqlitestore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/storage"
)

// BenchmarkPut measures durable compare-and-swap Puts of 512-byte values
// from W goroutines, each rewriting a key of its own (a job's record), at
// W = 1, 4 and 16. Besides ns/op it reports cpu-µs/op (the process's user
// and system time per Put) and puts/commit (how many writes shared a sync).
func BenchmarkPut(b *testing.B) {
	value := make([]byte, 512)
	for _, w := range []int{1, 4, 16} {
		b.Run("W="+strconv.Itoa(w), func(b *testing.B) {
			d := newDriver(b)
			s := storage.New(d)
			ctx := b.Context()
			var next atomic.Int64
			var wg sync.WaitGroup
			commits0 := commits(d)
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := range w {
				wg.Go(func() {
					key := fmt.Sprintf("jobs/j%03d.json", i)
					var v storage.Version
					cond := storage.Condition{}
					for next.Add(1) <= int64(b.N) {
						var err error
						if v, err = s.Put(ctx, key, value, cond); err != nil {
							b.Error(err)
							return
						}
						cond = storage.IfMatch(v)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			if c := commits(d) - commits0; c > 0 {
				b.ReportMetric(float64(b.N)/float64(c), "puts/commit")
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCommit measures what writing a job's keys together would save:
// W goroutines each rewrite k keys of their own (512 bytes, compare and
// swap), as k Puts ("puts") or as one Commit of k writes ("commit"). An
// op is one write either way; cpu-µs/op is the process's CPU per write and
// writes/commit how many writes shared a sync.
func BenchmarkCommit(b *testing.B) {
	value := make([]byte, 512)
	for _, w := range []int{1, 16} {
		for _, k := range []int{4} {
			for _, mode := range []string{"puts", "commit"} {
				b.Run(fmt.Sprintf("W=%d/k=%d/%s", w, k, mode), func(b *testing.B) {
					d := newDriver(b)
					s := storage.New(d)
					ctx := b.Context()
					var next atomic.Int64
					var wg sync.WaitGroup
					commits0, cpu0 := commits(d), cpuTime()
					b.ResetTimer()
					for i := range w {
						wg.Go(func() {
							ws := make([]storage.Write, k)
							for j := range ws {
								ws[j] = storage.Write{Key: fmt.Sprintf("jobs/j%03d-%d.json", i, j), Value: value, Cond: storage.IfNotExists()}
							}
							for next.Add(int64(k)) <= int64(b.N) {
								if err := writeAll(ctx, s, ws, mode == "commit"); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					b.StopTimer()
					b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
					if c := commits(d) - commits0; c > 0 {
						b.ReportMetric(float64(b.N)/float64(c), "writes/commit")
					}
				})
			}
		}
	}
}

// writeAll writes ws, as one Commit or one Put each, and sets each
// write's condition to match the version it wrote.
func writeAll(ctx context.Context, s *storage.Store, ws []storage.Write, together bool) error {
	if together {
		vs, err := s.Commit(ctx, ws)
		for j := range vs {
			ws[j].Cond = storage.IfMatch(vs[j])
		}
		return err
	}
	for j := range ws {
		v, err := s.Put(ctx, ws[j].Key, ws[j].Value, ws[j].Cond)
		if err != nil {
			return err
		}
		ws[j].Cond = storage.IfMatch(v)
	}
	return nil
}
