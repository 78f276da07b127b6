package jobqueue_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// alwaysFails is a handler whose every attempt fails.
func alwaysFails(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
	return lifecycle.JobOutput{}, errors.New("smtp down")
}

// TestTypeTimeout: a handler call of a user type is bounded by its
// type's Timeout, else by Config.StepTimeout, on the fake clock, even when
// the handler ignores its context.
func TestTypeTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		timeout time.Duration // TypeConfig.Timeout
		want    time.Duration
	}{
		{"the type's", 5 * time.Second, 5 * time.Second},
		{"the Queue's", 0, 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			release := make(chan struct{})
			defer close(release)
			stuck := jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
				<-release // ignores ctx
				return sent(ctx, j)
			})
			q := newQueue(t, memstore.New(), clk, func(c *jobqueue.Config) {
				c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: stuck, Timeout: tt.timeout}}
				c.StepTimeout, c.LeaseTTL, c.Backoff = 30*time.Second, time.Hour, []time.Duration{time.Minute}
			})
			enqueueEmail(t, q, "job-1", 3)
			j := runToDeadline(t, clk, claim(t, q, "w1"), tt.want)
			if j.Status != lifecycle.JobRetryBackoff || j.ErrorCode != codes.JobTimeout {
				t.Fatalf("%s %s, want RETRY_BACKOFF TIMEOUT", j.Status, j.ErrorCode)
			}
			if want := t0.Add(tt.want + time.Minute); !j.NextAttemptAt.Equal(want) {
				t.Fatalf("next attempt at %s, want %s: the attempt failed at +%s", j.NextAttemptAt, want, j.NextAttemptAt.Sub(t0)-time.Minute)
			}
		})
	}
	t.Run("an earlier move of the clock ends nothing", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(t0)
		release := make(chan struct{})
		q := newQueue(t, memstore.New(), clk, func(c *jobqueue.Config) {
			c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
				<-release
				return sent(ctx, j)
			}), Timeout: 5 * time.Second}}
			c.LeaseTTL = time.Hour
		})
		enqueueEmail(t, q, "job-1", 3)
		c := claim(t, q, "w1")
		done := make(chan lifecycle.Job, 1)
		started := clk.WaitForTimers(clk.Pending() + 2)
		go func() { j, _ := c.Run(context.Background(), nil); done <- j }()
		<-started
		clk.Advance(5*time.Second - time.Millisecond)
		select {
		case j := <-done:
			t.Fatalf("the attempt ended %s before its deadline", j.Status)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		if j := <-done; j.Status != lifecycle.JobComplete {
			t.Fatalf("released before its deadline, the attempt ended %s", j.Status)
		}
	})
}

// TestTypeBackoff: the wait after a failed attempt of a user type is its
// type's BackoffFunc's, else its Backoff list's, else Config.Backoff's, on
// the fake clock; the attempts are the type's MaxAttempts.
func TestTypeBackoff(t *testing.T) {
	t.Parallel()
	byAttempt := func(j lifecycle.Job) time.Duration {
		if j.ErrorCode != codes.JobHandlerError || j.Error == nil || *j.Error != "smtp down" {
			return time.Hour // not given the job as failed
		}
		return time.Duration(j.Attempt) * time.Minute
	}
	tests := []struct {
		name string
		tc   jobqueue.TypeConfig
		want []time.Duration // the waits, one per attempt (the last one's before the burial)
	}{
		{"the type's list, its last repeating", jobqueue.TypeConfig{MaxAttempts: 4, Backoff: []time.Duration{2 * time.Second, 7 * time.Second}},
			[]time.Duration{2 * time.Second, 7 * time.Second, 7 * time.Second, 7 * time.Second}},
		{"the type's func", jobqueue.TypeConfig{MaxAttempts: 4, BackoffFunc: byAttempt},
			[]time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute}},
		{"the func before the list", jobqueue.TypeConfig{MaxAttempts: 3, Backoff: []time.Duration{time.Second}, BackoffFunc: byAttempt},
			[]time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute}},
		{"a negative wait is none", jobqueue.TypeConfig{MaxAttempts: 2, BackoffFunc: func(lifecycle.Job) time.Duration { return -time.Hour }},
			[]time.Duration{0, 0}},
		{"the Queue's", jobqueue.TypeConfig{}, []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			tt.tc.Handler = jobqueue.HandlerFunc(alwaysFails)
			q := newQueue(t, memstore.New(), clk, func(c *jobqueue.Config) {
				c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: tt.tc}
				c.Backoff = []time.Duration{3 * time.Second}
			})
			j, err := q.InsertJob(ctx, jobqueue.NewJob{JobID: "job-1", JobType: emailType})
			if err != nil {
				t.Fatal(err)
			}
			var waits []time.Duration
			for round := 0; j.Status != lifecycle.JobDead; round++ {
				if round > 20 {
					t.Fatalf("still %s after waits %v", j.Status, waits)
				}
				c, err := q.Claim(ctx, "w1")
				if err != nil {
					t.Fatal(err)
				}
				if c == nil { // its last wait is over: buried
					j = get(t, q, "job-1")
					continue
				}
				if j, err = c.Run(ctx, nil); err != nil {
					t.Fatal(err)
				}
				if j.Status == lifecycle.JobRetryBackoff {
					w := j.NextAttemptAt.Sub(clk.Now())
					waits = append(waits, w)
					clk.Advance(w)
				}
			}
			if !slices.Equal(waits, tt.want) || j.Attempt != len(tt.want) {
				t.Fatalf("waits %v, DEAD after attempt %d; want %v and %d", waits, j.Attempt, tt.want, len(tt.want))
			}
		})
	}
}

// TestTypeMaxAttempts: a job records its type's MaxAttempts (else the
// Queue's) when it is inserted, unless it names its own; a later Queue
// of another setting leaves the jobs already inserted as they were.
func TestTypeMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, clk := memstore.New(), clock.NewFake(t0)
	types := func(max int) func(*jobqueue.Config) {
		return func(c *jobqueue.Config) {
			c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{
				emailType: {Handler: jobqueue.HandlerFunc(alwaysFails), MaxAttempts: max, Backoff: []time.Duration{time.Second}},
				"REPORT":  {Handler: jobqueue.HandlerFunc(sent)},
			}
			c.MaxAttempts = 3
		}
	}
	q := newQueue(t, store, clk, types(2))
	jobs, err := q.InsertMany(ctx, []jobqueue.NewJob{
		{JobID: "typed", JobType: emailType}, {JobID: "own", JobType: emailType, MaxAttempts: 5}, {JobID: "queue", JobType: "REPORT"},
	})
	if err != nil {
		t.Fatal(err)
	}
	one, err := q.Insert(ctx, emailType, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := []int{jobs[0].MaxAttempts, jobs[1].MaxAttempts, jobs[2].MaxAttempts, one.MaxAttempts}
	if want := []int{2, 5, 3, 2}; !slices.Equal(got, want) {
		t.Fatalf("max_attempts %v, want %v (the type's, the job's own, the Queue's, the type's)", got, want)
	}
	// A Queue of the next release, whose type allows 9, runs the job
	// inserted under 2 to DEAD after 2.
	q2 := newQueue(t, store, clk, types(9))
	j := get(t, q2, "typed")
	for round := 0; j.Status != lifecycle.JobDead; round++ {
		if round > 40 {
			t.Fatalf("still %s after attempt %d", j.Status, j.Attempt)
		}
		c, err := q2.Claim(ctx, "w2")
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			clk.Advance(time.Second)
		} else if _, err = c.Run(ctx, nil); err != nil { // this job or another of its lane
			t.Fatal(err)
		}
		j = get(t, q2, "typed")
	}
	if j.Attempt != 2 || j.MaxAttempts != 2 {
		t.Fatalf("DEAD after attempt %d of %d, want 2 of 2", j.Attempt, j.MaxAttempts)
	}
}

// TestTypeConfigInvalid: attempts, a timeout or a wait out of range are
// refused by New.
func TestTypeConfigInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tc   jobqueue.TypeConfig
	}{
		{"max attempts over 100", jobqueue.TypeConfig{MaxAttempts: 101}},
		{"negative max attempts", jobqueue.TypeConfig{MaxAttempts: -1}},
		{"negative timeout", jobqueue.TypeConfig{Timeout: -time.Second}},
		{"negative backoff", jobqueue.TypeConfig{Backoff: []time.Duration{time.Second, -time.Second}}},
	}
	for _, tt := range tests {
		_, err := jobqueue.New(jobqueue.Config{Store: memstore.New(), Types: map[lifecycle.JobType]jobqueue.TypeConfig{emailType: tt.tc}})
		if !errors.Is(err, jobqueue.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", tt.name, err)
		}
	}
	if _, err := jobqueue.New(jobqueue.Config{Store: memstore.New(), Types: map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {MaxAttempts: 100, Timeout: time.Second}}}); err != nil {
		t.Fatalf("a valid TypeConfig refused: %v", err)
	}
}
