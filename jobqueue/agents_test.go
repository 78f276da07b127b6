package jobqueue

import (
	"context"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// TestScheduleOrder: take hands out only agents that are due, earliest
// first; schedule only ever brings a due time forward; a request made while
// a Claim is trying the agent is kept and applied when it is put back; and
// a waiter is woken when an agent becomes due sooner.
func TestScheduleOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	q, err := New(Config{Store: memstore.New(), Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := q.sched.agent("a"), q.sched.agent("b"), q.sched.agent("c")
	// New agents are due at once; push them to known times.
	for range 3 {
		if got := q.sched.take(t0); got == nil {
			t.Fatal("a new agent is not due at once")
		} else {
			q.sched.putBack(got, t0.Add(time.Hour))
		}
	}
	q.sched.schedule(a, t0.Add(3*time.Second))
	q.sched.schedule(b, t0.Add(1*time.Second))
	q.sched.schedule(c, t0.Add(2*time.Second))
	q.sched.schedule(b, t0.Add(5*time.Second)) // later: ignored
	if got := q.sched.take(t0); got != nil {
		t.Fatalf("took %s before it was due", got.name)
	}
	due, wake := q.sched.nextDue()
	if !due.Equal(t0.Add(time.Second)) {
		t.Fatalf("next due %v", due)
	}
	select {
	case <-wake:
		t.Fatal("woken with nothing new")
	default:
	}
	q.sched.schedule(c, t0) // sooner than anything: wakes the waiter
	select {
	case <-wake:
	default:
		t.Fatal("not woken when an agent became due sooner")
	}

	now := t0.Add(10 * time.Second)
	var order []*agentState
	for x := q.sched.take(now); x != nil; x = q.sched.take(now) {
		order = append(order, x)
	}
	if len(order) != 3 || order[0] != c || order[1] != b || order[2] != a {
		t.Fatalf("took %v, want c b a", names(order))
	}
	q.sched.putBack(b, now.Add(time.Hour))
	q.sched.putBack(c, now.Add(time.Hour))

	// a is being tried: a request for t0+20s waits for putBack, which
	// takes it over its own later time.
	q.sched.schedule(a, t0.Add(20*time.Second))
	if a.index >= 0 {
		t.Fatal("an agent being tried went back into the heap")
	}
	q.sched.putBack(a, now.Add(time.Hour))
	if got := q.sched.take(t0.Add(20 * time.Second)); got != a {
		t.Fatalf("took %v at t0+20s, want a", got)
	}
}

func names(as []*agentState) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.name)
	}
	return out
}

// TestRetryJudgedWhileStopping: a failed attempt's moves are judged on the
// record alone; a Worker stopping (its context ended) between the claim's
// check and the fail write no longer panics with "retryable_error refused:
// context canceled" (seen in the kill -9 proof at teardown).
func TestRetryJudgedWhileStopping(t *testing.T) {
	t.Parallel()
	q, err := New(Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, step := range []lifecycle.JobState{lifecycle.JobContextAssembly, lifecycle.JobNotebookLMCall, lifecycle.JobArtifactWrite} {
		d := &jobDoc{Job: lifecycle.Job{JobID: "j", Status: step, Attempt: 1, MaxAttempts: 3}}
		q.claims.retries.retry(ctx, d, time.Now(), step, "TIMEOUT", "stopped")
		if d.Status != lifecycle.JobRetryBackoff {
			t.Fatalf("from %s: %s, want RETRY_BACKOFF", step, d.Status)
		}
	}
}
