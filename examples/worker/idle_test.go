package main

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// idleWorker starts this program's Worker (every part but the API: the
// runner, the job worker, the NLM processor, the scheduler, the inbox
// expiry, the retention janitor) on the fake clock over a store that
// cannot watch, as S3, and counts the store's requests. It returns the
// counting store and the fake clock; the Worker stops with the test.
func idleWorker(t *testing.T, args ...string) (*teststores.Counting, *clock.Fake) {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC))
	// Counting embeds the Store interface only: the memstore's Watch is
	// hidden, so the Worker polls as it does over S3.
	cs := &teststores.Counting{Store: memstore.New()}
	o, err := parseFlags(append([]string{"-addr", "", "-log-level", "ERROR", "-drain", "5s"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.store, o.clock = storage.New(cs), clk
	w, err := build(ctx, o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() { done <- w.serve(sctx, func(string) { close(started) }) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	<-started
	// The parts start their loops on goroutines of their own: wait until
	// each waits on the clock (the runner, the NLM processor, the inbox
	// expiry, the job worker's lane poll, sweep and four slots), or the
	// clock would move before they look.
	select {
	case <-clk.WaitForTimers(startTimers):
	case <-time.After(time.Minute):
		t.Fatalf("the Worker's loops did not start: %d timers", clk.Pending())
	}
	return cs, clk
}

// startTimers is how many timers the idle Worker's loops wait on.
const startTimers = 9

// advance moves clk through d of fake time, timer by timer, each once the
// Worker is idle.
func advance(t *testing.T, clk *clock.Fake, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	end := clk.Now().Add(d)
	for clk.Now().Before(end) {
		if next, ok := clk.Next(); !ok || next.After(end) {
			if err := clk.WaitIdle(ctx); err != nil {
				t.Fatal(err)
			}
			clk.Advance(end.Sub(clk.Now()))
			break
		}
		if _, _, err := clk.AdvanceToNext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := clk.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIdleWorkerCost holds an idle Worker's cost on a store without a
// watch (S3 bills each request): at most one request a second on average,
// all parts together, over ten minutes of fake time after a minute's
// start-up (docs/performance.md); fresh, and after it ran jobs of a few
// agents (which the queue then knows and checks).
func TestIdleWorkerCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		jobs int
		args []string
	}{
		{"after 0 jobs", 0, nil},
		{"after 3 jobs", 3, nil},
		// With the API, its event feed polls the audit log too.
		{"with the API, after 3 jobs", 3, []string{"-addr", "127.0.0.1:0"}},
	}
	for _, tt := range tests {
		jobs := tt.jobs
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cs, clk := idleWorker(t, tt.args...)
			ctx := context.Background()
			other, err := jobqueue.New(jobqueue.Config{Store: storage.New(cs.Store), Clock: clk, Node: "other"})
			if err != nil {
				t.Fatal(err)
			}
			for i := range jobs {
				_, err := other.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("job-%d", i),
					RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: fmt.Sprintf("agent-%d", i)})
				if err != nil {
					t.Fatal(err)
				}
			}
			advance(t, clk, time.Minute)
			for i := range jobs {
				if j, err := other.Get(ctx, lifecycle.ActorGateway, fmt.Sprintf("job-%d", i)); err != nil || j.Status != lifecycle.JobComplete {
					t.Fatalf("job-%d: %s, %v", i, j.Status, err)
				}
			}
			cs.Reset()
			const span = 10 * time.Minute
			advance(t, clk, span)
			perSecond := float64(cs.PagedOps()) / span.Seconds()
			t.Logf("idle: %.3f requests/s (%d GET, %d PUT, %d DELETE, %d LIST pages)", perSecond,
				cs.Gets.Load(), cs.Puts.Load(), cs.Deletes.Load(), cs.Pages.Load())
			if perSecond > 1 {
				t.Fatalf("an idle Worker makes %.2f store requests a second, want at most 1", perSecond)
			}
		})
	}
}

// TestPickupAfterIdle: a job another process enqueues (another Queue on
// the same store, which cannot watch) after ten idle minutes is picked up
// within -idle-poll, the documented worst case.
func TestPickupAfterIdle(t *testing.T) {
	t.Parallel()
	cs, clk := idleWorker(t)
	ctx := context.Background()
	advance(t, clk, 10*time.Minute)
	other, err := jobqueue.New(jobqueue.Config{Store: storage.New(cs.Store), Clock: clk, Node: "other"})
	if err != nil {
		t.Fatal(err)
	}
	enqueued := clk.Now()
	job, err := other.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{
		JobID: "job-after-idle", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: AgentResearch})
	if err != nil {
		t.Fatal(err)
	}
	for clk.Now().Sub(enqueued) <= time.Minute {
		if err := clk.WaitIdle(ctx); err != nil {
			t.Fatal(err)
		}
		j, err := other.Get(ctx, lifecycle.ActorGateway, job.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != lifecycle.JobQueued && j.Status != lifecycle.JobPending {
			waited := clk.Now().Sub(enqueued)
			t.Logf("picked up %v after the enqueue (%s)", waited, j.Status)
			if waited > defaultIdlePoll {
				t.Fatalf("picked up %v after the enqueue, want at most -idle-poll's %v", waited, defaultIdlePoll)
			}
			return
		}
		if _, ok, err := clk.AdvanceToNext(ctx); err != nil || !ok {
			t.Fatalf("advancing the clock: %v, %v", ok, err)
		}
	}
	t.Fatalf("not picked up within a minute of the enqueue")
}
