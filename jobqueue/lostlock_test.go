package jobqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
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

// TestReconcileFindsWhatTheSweepCannot: a job in flight in no lane and
// named by no lock (the store lost the lock while the job ran, or the lane
// entry while it waited) is out of the sweep's sight for good; Reconcile,
// which reads every job, puts it back in its lane, and it runs.
func TestReconcileFindsWhatTheSweepCannot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		lose func(t *testing.T, s *storage.Store, q *jobqueue.Queue) // leaves job-1 stranded
		want func(r jobqueue.SweepReport) bool
	}{
		{"lock lost while its job ran", func(t *testing.T, s *storage.Store, q *jobqueue.Queue) {
			if c := claim(t, q, "w1"); c == nil || c.Job().JobID != "job-1" {
				t.Fatal("job-1 not claimed")
			} // its worker dies here, and the store loses its lock
			deleteKey(t, s, lockKeyOf("agent-r"))
		}, func(r jobqueue.SweepReport) bool { return r.Rescued == 1 }},
		{"lane entry lost while its job waited", func(t *testing.T, s *storage.Store, q *jobqueue.Queue) {
			deleteKey(t, s, laneKeyOf(t, s, "agent-r"))
		}, func(r jobqueue.SweepReport) bool { return r.Relaned == 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			s := storage.New(memstore.New())
			q := newQueue(t, s, clk)
			enqueue(t, q, "job-1", "agent-r")
			tt.lose(t, s, q)
			clk.Advance(time.Hour) // every lease and backoff long over
			if r, err := q.Sweep(ctx); err != nil || r.Rescued+r.Relaned != 0 {
				t.Fatalf("Sweep = %+v, %v: it was not to see the stranded job (the test would prove nothing)", r, err)
			}
			if c := claim(t, q, "w2"); c != nil {
				t.Fatalf("a claim found %s before the reconcile", c.Job().JobID)
			}
			r, err := (jobqueue.Operator{Queue: q}).Reconcile(ctx)
			if err != nil || !tt.want(r) || r.Jobs != 1 {
				t.Fatalf("Reconcile = %+v, %v", r, err)
			}
			var c *jobqueue.Claim
			for i := 0; i < 100 && c == nil; i++ {
				clk.Advance(time.Minute)
				c = claim(t, q, "w2")
			}
			if c == nil || c.Job().JobID != "job-1" {
				t.Fatal("no claim took job-1 after the reconcile")
			}
			if j, err := c.Run(ctx, okHandlers()); err != nil || j.Status != lifecycle.JobComplete {
				t.Fatalf("job-1 ran to %s, %v", j.Status, err)
			}
		})
	}
}

// TestLostLockStartsAReconcile: when a claim finds an agent's lock lost
// while its lane holds work, the job the lock named is in no lane; the
// Worker's sweep then reconciles, and that job runs too.
func TestLostLockStartsAReconcile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := storage.New(memstore.New())
	q := newQueue(t, s, clk)
	enqueue(t, q, "job-1", "agent-s")
	if c := claim(t, q, "w1"); c == nil || c.Job().JobID != "job-1" {
		t.Fatal("job-1 not claimed")
	} // its worker dies, the store loses the lock
	enqueue(t, q, "job-2", "agent-s")
	deleteKey(t, s, lockKeyOf("agent-s"))
	clk.Advance(time.Hour)
	c := claim(t, q, "w2") // reads the lock missing with job-2 ready: remakes it
	for i := 0; i < 10 && c == nil; i++ {
		clk.Advance(time.Second)
		c = claim(t, q, "w2")
	}
	if c == nil || c.Job().JobID != "job-2" {
		t.Fatal("job-2 not claimed after its lock was remade")
	}
	if _, err := c.Run(ctx, okHandlers()); err != nil {
		t.Fatal(err)
	}
	r, swept, err := q.SweepIfDue(ctx, "w2", time.Minute)
	if err != nil || !swept || r.Rescued != 1 {
		t.Fatalf("SweepIfDue = %+v, %v, %v: want job-1 rescued by the reconcile", r, swept, err)
	}
	if st := get(t, q, "job-1").Status; st != lifecycle.JobRetryBackoff {
		t.Fatalf("job-1 is %s, want RETRY_BACKOFF", st)
	}
	clk.Advance(2 * time.Minute)
	if r, _, err := q.SweepIfDue(ctx, "w2", time.Minute); err != nil || r.Rescued+r.Relaned != 0 {
		t.Fatalf("a second sweep = %+v, %v: the reconcile was to be over", r, err)
	}
}

func deleteKey(t *testing.T, s *storage.Store, key string) {
	t.Helper()
	if err := s.Delete(context.Background(), key, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
}

func lockKeyOf(agent string) string {
	k, _ := layout.AgentLockKey(agent)
	return k
}

// laneKeyOf is the one entry in agent's ready lane.
func laneKeyOf(t *testing.T, s *storage.Store, agent string) string {
	t.Helper()
	var keys []string
	for k, err := range s.List(context.Background(), layout.LanesPrefix+agent+"/") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if len(keys) != 1 {
		t.Fatalf("lane of %s = %v, want one entry", agent, keys)
	}
	return keys[0]
}

// TestReconcileGoesOnAcrossSweeps: a reconcile asked for reads a batch of
// jobs per sweep, its place kept in the sweep's lease, until it is done.
func TestReconcileGoesOnAcrossSweeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := storage.New(memstore.New())
	q := newQueue(t, s, clk, func(c *jobqueue.Config) { c.SweepBatch = 2 })
	for _, id := range []string{"job-a", "job-b", "job-c", "job-d"} {
		enqueue(t, q, id, "agent-"+id)
		c := claim(t, q, "w1")
		if _, err := c.Run(ctx, okHandlers()); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(t, q, "job-z", "agent-z")
	if c := claim(t, q, "w1"); c == nil || c.Job().JobID != "job-z" {
		t.Fatal("job-z not claimed")
	}
	enqueue(t, q, "job-y", "agent-z")
	deleteKey(t, s, lockKeyOf("agent-z"))
	clk.Advance(time.Hour)
	c := claim(t, q, "w2") // reads the lock missing with job-y ready: remakes it
	for i := 0; i < 10 && c == nil; i++ {
		clk.Advance(time.Second)
		c = claim(t, q, "w2")
	}
	if c == nil || c.Job().JobID != "job-y" {
		t.Fatal("job-y not claimed after its lock was remade")
	}
	sweeps := 0
	for ; sweeps < 10 && get(t, q, "job-z").Status != lifecycle.JobRetryBackoff; sweeps++ {
		if _, _, err := q.SweepIfDue(ctx, "w2", time.Minute); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
	}
	// Six jobs, two a sweep: job-z is the sixth key.
	if sweeps != 3 {
		t.Fatalf("job-z rescued after %d sweeps, want 3", sweeps)
	}
}
