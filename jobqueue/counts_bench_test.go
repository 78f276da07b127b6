package jobqueue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// countsWorld is a memstore queue of one user type with finished jobs
// run through it over three days (closed, so rolled up at the first
// count) and 50 jobs waiting; its clock stands at noon after.
func countsWorld(tb testing.TB, finished int) (*teststores.Counting, *jobqueue.Queue, *clock.Fake) {
	tb.Helper()
	ctx := context.Background()
	cs := &teststores.Counting{Store: memstore.New()}
	clk := clock.NewFake(t0)
	q := newQueue(tb, storage.New(cs), clk, func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(sent)}}
	})
	step := 3 * 24 * time.Hour / time.Duration(max(1, finished))
	for i := range finished {
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("j-%07d", i), JobType: emailType, AgentSlug: fmt.Sprintf("a-%d", i%20)}); err != nil {
			tb.Fatal(err)
		}
		c := claim(tb, q, "w1")
		if _, err := c.Run(ctx, nil); err != nil {
			tb.Fatal(err)
		}
		clk.Advance(step)
	}
	clk.Advance(t0.Add(3*24*time.Hour + 12*time.Hour).Sub(clk.Now()))
	for i := range 50 {
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("w-%03d", i), JobType: emailType, AgentSlug: fmt.Sprintf("a-%d", i%20)}); err != nil {
			tb.Fatal(err)
		}
	}
	return cs, q, clk
}

// BenchmarkCounts: a count (Queue.Counts) once the history is rolled up,
// with its store round trips (ops/count, as S3 bills them), over 1,000
// jobs run through the queue and over a million whose rollups are
// written as the rollup would have left them (a count reads a day's
// record and the hours' chunks after it, never an audit object of a
// closed hour: what it reads grows with the job types and agents, not
// the jobs); and the rollup itself, once, per audit object
// (rollup/10000: its time, its round trips an object, and the calls it
// took, each within its 20,000 reads). finished=1000/tenant is the same
// count for one named tenant: the same reads, its rows kept.
func BenchmarkCounts(b *testing.B) {
	read := func(b *testing.B, cs *teststores.Counting, q *jobqueue.Queue) {
		readAs(b, context.Background(), cs, q)
	}
	b.Run("finished=1000", func(b *testing.B) {
		cs, q, _ := countsWorld(b, 1000)
		read(b, cs, q)
	})
	b.Run("finished=1000/tenant", func(b *testing.B) {
		cs, q, _ := countsWorld(b, 1000)
		readAs(b, lifecycle.WithTenant(context.Background(), "acme"), cs, q)
	})
	ctx := context.Background()
	b.Run("finished=1000000", func(b *testing.B) {
		cs, q, clk := countsWorld(b, 0)
		if err := jobqueue.WriteCountsHistoryForTest(ctx, storage.New(cs), clk.Now(), 1000000, 20); err != nil {
			b.Fatal(err)
		}
		read(b, cs, q)
		c, _ := (jobqueue.Operator{Queue: q}).Counts(ctx, lifecycle.ActorAdmin)
		if c.Total[lifecycle.JobComplete]+c.Total[lifecycle.JobDead] < 990000 {
			b.Fatalf("counts %v, want a million finished", c.Total)
		}
	})
	b.Run("rollup/10000", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			cs, q, _ := countsWorld(b, 10000)
			cs.Reset()
			b.StartTimer()
			calls := 0
			for partial := true; partial; calls++ { // each call within its reads
				c, err := (jobqueue.Operator{Queue: q}).Counts(ctx, lifecycle.ActorAdmin)
				if err != nil || calls > 10 {
					b.Fatalf("counts %+v after %d calls, %v", c.Total, calls, err)
				}
				partial = c.Partial
			}
			b.ReportMetric(float64(cs.PagedOps())/10000, "ops/object")
			b.ReportMetric(float64(calls), "calls")
		}
	})
}

// readAs measures a count under ctx (its tenant) once the history is
// rolled up: its store round trips a count.
func readAs(b *testing.B, ctx context.Context, cs *teststores.Counting, q *jobqueue.Queue) {
	if c, err := (jobqueue.Operator{Queue: q}).Counts(ctx, lifecycle.ActorAdmin); err != nil || c.Partial {
		b.Fatalf("counts %+v, %v", c.Total, err)
	}
	cs.Reset()
	n := 0
	for b.Loop() {
		if _, err := (jobqueue.Operator{Queue: q}).Counts(ctx, lifecycle.ActorAdmin); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(cs.PagedOps())/float64(n), "ops/count")
}
