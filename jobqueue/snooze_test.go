package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// TestSnooze: a handler of a user type that snoozes sends its job back to
// QUEUED, not started again before the snooze is over, without using up
// an attempt (a job of one attempt snoozes three times and still
// completes) or recording a failure; the moves are on the timeline and in
// the audit log, and the snoozed runs give their number back.
func TestSnooze(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		snoozes  int
		wait     time.Duration
		failOnce bool // the run after the snoozes fails once first
		want     lifecycle.JobState
	}{
		{"three snoozes of a one-attempt job", 3, time.Minute, false, lifecycle.JobComplete},
		{"a snooze of zero runs again at once", 1, 0, false, lifecycle.JobComplete},
		{"a failure after snoozes uses the one attempt", 2, time.Minute, true, lifecycle.JobDead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			calls := 0
			q := emailQueue(t, clk, jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
				calls++
				if j.Attempt != 1 {
					return lifecycle.JobOutput{}, fmt.Errorf("run %d has attempt %d, want 1: a snooze is no attempt", calls, j.Attempt)
				}
				switch {
				case calls <= tt.snoozes:
					return lifecycle.JobOutput{}, jobqueue.Snooze(tt.wait)
				case tt.failOnce:
					return lifecycle.JobOutput{}, errors.New("smtp down")
				}
				return sent(ctx, j)
			}))
			enqueueEmail(t, q, "job-s", 1)
			for i := range tt.snoozes {
				start := clk.Now()
				c := claim(t, q, "w1")
				if c == nil {
					t.Fatalf("snooze %d: nothing to claim", i)
				}
				j, err := c.Run(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if j.Status != lifecycle.JobQueued || j.Attempt != 0 || j.Error != nil || j.Lease != nil {
					t.Fatalf("after snooze %d: %s attempt %d error %v lease %v; want QUEUED, attempt 0, no error, no lease", i, j.Status, j.Attempt, j.Error, j.Lease)
				}
				if tt.wait > 0 {
					if j.ScheduledAt == nil || !j.ScheduledAt.Equal(start.Add(tt.wait)) {
						t.Fatalf("after snooze %d: scheduled_at %v, want %v", i, j.ScheduledAt, start.Add(tt.wait))
					}
					clk.Advance(tt.wait - time.Second)
					if c := claim(t, q, "w1"); c != nil {
						t.Fatalf("claimed %s a second before its snooze ended", c.Job().JobID)
					}
					clk.Advance(time.Second)
				}
			}
			c := claim(t, q, "w1")
			if c == nil {
				t.Fatal("the snoozed job was not claimed once its snooze ended")
			}
			if _, err := c.Run(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if tt.failOnce {
				clk.Advance(time.Hour)
				if c := claim(t, q, "w1"); c != nil { // buries it
					t.Fatalf("claimed %+v", c.Job())
				}
			}
			j := get(t, q, "job-s")
			if j.Status != tt.want {
				t.Fatalf("ended %s (%s), want %s", j.Status, j.ErrorCode, tt.want)
			}
			h, err := (jobqueue.Operator{Queue: q}).History(ctx, lifecycle.ActorAdmin, "job-s")
			if err != nil {
				t.Fatal(err)
			}
			snoozes := 0
			for _, m := range h.Moves {
				if m.Event == "snooze" && m.From == lifecycle.JobRunning && m.To == lifecycle.JobQueued {
					snoozes++
				}
			}
			if snoozes != tt.snoozes {
				t.Fatalf("%d snooze moves on the timeline, want %d: %+v", snoozes, tt.snoozes, h.Moves)
			}
			for i, a := range h.Attempts {
				if a.Attempt != 1 {
					t.Fatalf("run %d numbered %d, want 1 (snoozes give theirs back): %+v", i, a.Attempt, h.Attempts)
				}
			}
			audited := 0
			for _, m := range moves(t, q, "job-s") {
				if m == "RUNNING>QUEUED" {
					audited++
				}
			}
			if audited != tt.snoozes {
				t.Fatalf("%d snoozes in the audit log, want %d", audited, tt.snoozes)
			}
		})
	}
}

// TestSnoozeCancelled: a cancel asked for while the handler ran wins over
// its snooze; and an NLM type's handler that snoozes fails its attempt,
// as the spec's machine has no snooze.
func TestSnoozeCancelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	var q *jobqueue.Queue
	q = emailQueue(t, clk, jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
		if _, err := q.Cancel(ctx, lifecycle.ActorAdmin, j.JobID); err != nil {
			return lifecycle.JobOutput{}, err
		}
		return lifecycle.JobOutput{}, jobqueue.Snooze(time.Minute)
	}))
	enqueueEmail(t, q, "job-c", 3)
	c := claim(t, q, "w1")
	if c == nil {
		t.Fatal("no claim")
	}
	if j, err := c.Run(ctx, nil); err != nil || j.Status != lifecycle.JobCancelled {
		t.Fatalf("snoozed after its cancel was asked: %s, %v; want CANCELLED", j.Status, err)
	}

	nq := newQueue(t, memstore.New(), clk)
	if _, err := nq.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: "job-n", JobType: lifecycle.JobBrief, AgentSlug: "a"}); err != nil {
		t.Fatal(err)
	}
	j := runOnce(t, nq, jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{}, jobqueue.Snooze(time.Minute)
	}})
	if j.Status != lifecycle.JobRetryBackoff || j.ErrorCode != codes.JobHandlerError {
		t.Fatalf("an NLM job that snoozed: %s %s, want RETRY_BACKOFF %s", j.Status, j.ErrorCode, codes.JobHandlerError)
	}
}
