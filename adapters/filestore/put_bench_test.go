//go:build unix

package filestore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/storage"
)

// BenchmarkPut measures durable Puts of 512-byte values from several
// goroutines (8 on two cores), as a Worker's writers make them: Update
// rewrites a key of the goroutine's own with IfMatch of the version its
// last Put returned (a job's record), Create writes new keys into one
// directory with IfNotExists (a new job). Every Put is durable when it
// returns. issue 22's system-call counts come from running it under
// strace -f -c with a fixed -benchtime (see docs/performance.md).
func BenchmarkPut(b *testing.B) {
	b.Run("Update", func(b *testing.B) {
		s, err := filestore.New(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		var next atomic.Int64
		b.SetParallelism(4)
		b.ResetTimer()
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
	})
	b.Run("Create", func(b *testing.B) {
		s, err := filestore.New(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Put(b.Context(), "jobs/first.json", benchValue, storage.Condition{}); err != nil {
			b.Fatal(err)
		}
		var next atomic.Int64
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := fmt.Sprintf("jobs/n%08d.json", next.Add(1))
				if _, err := s.Put(b.Context(), key, benchValue, storage.IfNotExists()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
