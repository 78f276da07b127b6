package jobqueue_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// countsByList counts the jobs the list yields, as "type/agent/state".
func countsByList(t *testing.T, q *jobqueue.Queue) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for j, err := range q.List(context.Background(), lifecycle.ActorAdmin) {
		if err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("%s/%s/%s", j.JobType, j.AgentSlug, j.Status)]++
	}
	return out
}

// countsByCounts is Counts in countsByList's form; it fails on a partial
// answer.
func countsByCounts(t *testing.T, q *jobqueue.Queue) map[string]int64 {
	t.Helper()
	c, err := (jobqueue.Operator{Queue: q}).Counts(context.Background(), lifecycle.ActorAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if c.Partial {
		t.Fatal("partial counts")
	}
	out := map[string]int64{}
	total := map[lifecycle.JobState]int64{}
	for _, r := range c.Rows {
		for st, n := range r.Counts {
			out[fmt.Sprintf("%s/%s/%s", r.JobType, r.AgentSlug, st)] += n
			total[st] += n
		}
	}
	if !maps.Equal(total, c.Total) {
		t.Fatalf("total %v, rows add up to %v", c.Total, total)
	}
	return out
}

// sameCounts fails when Counts and the list disagree.
func sameCounts(t *testing.T, q *jobqueue.Queue, after string) {
	t.Helper()
	list, counts := countsByList(t, q), countsByCounts(t, q)
	if !maps.Equal(list, counts) {
		t.Fatalf("after %s: counts\n%s\nthe list\n%s", after, show(counts), show(list))
	}
}

func show(m map[string]int64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "  %s %d\n", k, m[k])
	}
	return b.String()
}

// TestCountsMatchTheList: the counts equal the list's right after each
// move an operator or a worker makes (a completion, a failure to
// RETRY_BACKOFF and to DEAD, a requeue, a cancel of a QUEUED and of a
// RETRY_BACKOFF job, a pickup), while the hours and days they happened in
// are open, and after they closed and were rolled up; and once rolled up,
// a count reads the rollups, not the hour's audit objects again.
func TestCountsMatchTheList(t *testing.T) {
	for _, sc := range faultStores(false) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0.Add(50 * time.Minute)) // the first hour closes soon
			h := jobqueue.HandlerFunc(func(_ context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
				switch {
				case strings.HasPrefix(j.JobID, "dead"):
					return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("no such address"))
				case strings.HasPrefix(j.JobID, "retry"):
					return lifecycle.JobOutput{}, errors.New("later")
				}
				return lifecycle.JobOutput{Content: []byte(`{"sent":true}`)}, nil
			})
			s := sc.new(t)
			q := newQueue(t, s, clk, func(c *jobqueue.Config) {
				c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: h}}
				c.Backoff = []time.Duration{time.Hour}
			})
			if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: "typed-1", JobType: emailType}); err != nil {
				t.Fatal(err) // no agent: its type's lane
			}
			enqueue(t, q, "brief-1", "agent-b") // an NLM type's
			sameCounts(t, q, "the enqueues")
			for range 2 {
				if _, err := claim(t, q, "w0").Run(ctx, okHandlers()); err != nil {
					t.Fatal(err)
				}
			}
			sameCounts(t, q, "two completions")
			for _, id := range []string{"ok-1", "dead-1", "retry-1", "ok-2", "wait-1"} {
				enqueueEmail(t, q, id, 3)
				clk.Advance(time.Millisecond) // the lane's order is theirs
			}
			sameCounts(t, q, "the enqueues of one agent's")

			runJob := func(id string) {
				t.Helper()
				c := claim(t, q, "w1")
				if c == nil || c.Job().JobID != id {
					t.Fatalf("claimed %v, want %s", c.Job().JobID, id)
				}
				if _, err := c.Run(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
			runJob("ok-1") // one agent ("mailer"): its jobs in lane order
			sameCounts(t, q, "a completion")
			runJob("dead-1")
			sameCounts(t, q, "a permanent failure")
			runJob("retry-1")
			sameCounts(t, q, "a failure to RETRY_BACKOFF")
			if _, err := q.Requeue(ctx, lifecycle.ActorAdmin, "dead-1"); err != nil {
				t.Fatal(err)
			}
			sameCounts(t, q, "a requeue")
			if _, err := q.Cancel(ctx, lifecycle.ActorAdmin, "wait-1"); err != nil {
				t.Fatal(err)
			}
			sameCounts(t, q, "a cancel")
			running := claim(t, q, "w1") // ok-2, RUNNING
			sameCounts(t, q, "a pickup")
			if _, err := running.Run(ctx, nil); err != nil {
				t.Fatal(err)
			}

			clk.Advance(2 * time.Hour) // the first hours close: rolled up
			sameCounts(t, q, "the hour closed")
			if n := countKeys(t, s, "stats/jobs/hours/"); n == 0 {
				t.Fatal("no hour rolled up")
			}
			if _, err := q.Cancel(ctx, lifecycle.ActorAdmin, "retry-1"); err != nil {
				t.Fatal(err)
			}
			sameCounts(t, q, "a cancel of a RETRY_BACKOFF job")
			clk.Advance(48 * time.Hour) // the day closes
			runJob("dead-1")            // requeued, fails again: DEAD
			sameCounts(t, q, "the day closed")
			if n := countKeys(t, s, "stats/jobs/days/"); n == 0 {
				t.Fatal("no day rolled up")
			}
			if _, err := q.Requeue(ctx, lifecycle.ActorAdmin, "dead-1"); err != nil {
				t.Fatal(err)
			}
			sameCounts(t, q, "a requeue of a job whose first death was rolled up")
		})
	}
}

// TestCountsReadRollups: once an hour is rolled up, counting reads its
// rollup, not its audit objects: the reads of a count stay the same
// whether the closed hours held 10 jobs or 300.
func TestCountsReadRollups(t *testing.T) {
	t.Parallel()
	reads := func(n int) int64 {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		cs := &teststores.Counting{Store: memstore.New()}
		q := newQueue(t, storage.New(cs), clk, func(c *jobqueue.Config) {
			c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(sent)}}
		})
		for i := range n {
			if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("j-%04d", i), JobType: emailType, AgentSlug: fmt.Sprintf("a-%d", i%7)}); err != nil {
				t.Fatal(err)
			}
		}
		for {
			c := claim(t, q, "w1")
			if c == nil {
				break
			}
			if _, err := c.Run(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(3 * 24 * time.Hour)
		first := countsByCounts(t, q) // rolls up
		if first[fmt.Sprintf("%s/a-0/COMPLETE", emailType)] == 0 {
			t.Fatalf("counts %v", first)
		}
		cs.Reset()
		countsByCounts(t, q)
		return cs.PagedOps()
	}
	small, large := reads(10), reads(300)
	if small != large {
		t.Fatalf("a count cost %d round trips over 10 jobs, %d over 300", small, large)
	}
	t.Logf("a count costs %d round trips over 10 or 300 finished jobs", small)
}
