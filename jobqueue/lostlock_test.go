package jobqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// TestLostAgentLockIsRemade: a store that loses an agent's lock (a MinIO
// cluster lost one when a Worker holding it was killed -9 mid-write, and
// the cluster scenario then left 145 of 150 jobs QUEUED for good) has it
// made again by the next claims once the lane holds work: at once where
// the store settles at once, after a settle time where it settles.
func TestLostAgentLockIsRemade(t *testing.T) {
	t.Parallel()
	for _, settle := range []time.Duration{0, 5 * time.Second} {
		t.Run(settle.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			fs := faultstore.New(memstore.New())
			fs.SetSettle(settle, clk.Now)
			s := storage.New(fs)
			q := newQueue(t, s, clk)
			enqueue(t, q, "job-1", "agent-l")
			lockKey, _ := layout.AgentLockKey("agent-l")
			if err := s.Delete(ctx, lockKey, storage.Condition{}); err != nil {
				t.Fatal(err)
			}
			var got string
			for i := 0; i < 100 && got == ""; i++ {
				if c := claim(t, q, "w1"); c != nil {
					got = c.Job().JobID
					break
				}
				clk.Advance(time.Second)
			}
			if got != "job-1" {
				t.Fatalf("no claim took the job after its agent's lock was lost")
			}
			if now := clk.Now(); settle > 0 && now.Sub(t0) < settle {
				t.Errorf("the lock was remade %v after it was first read missing, before the settle time %v", now.Sub(t0), settle)
			}
		})
	}
}
