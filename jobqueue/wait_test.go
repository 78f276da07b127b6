package jobqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// noWatch hides a store's Watch: a store that cannot signal, as S3.
type noWatch struct{ driver.Store }

type waited struct {
	job lifecycle.Job
	err error
}

// startWait calls q.Wait(ctx, id) in a goroutine counted as work on clk
// from here on, and returns where its answer arrives.
func startWait(ctx context.Context, q *jobqueue.Queue, clk *clock.Fake, id string) <-chan waited {
	res := make(chan waited, 1)
	wctx := activity.Start(ctx, clk)
	go func() {
		ctx, end := activity.Enter(wctx, clk)
		defer end()
		j, err := q.Wait(ctx, id)
		res <- waited{j, err}
	}()
	return res
}

// TestWait: Wait returns the job once COMPLETE or DEAD, woken by the
// writes of its own Queue and, through the store's watch, of another
// Queue's, without the fake clock moving; over a store without a watch, by
// its poll, at exactly its first poll's 25 ms.
func TestWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		watch    bool // the store watches
		other    bool // another Queue runs the job
		fail     error
		want     lifecycle.JobState
		wantPoll time.Duration // how far the clock moves before Wait returns
	}{
		{"own queue completes", true, false, nil, lifecycle.JobComplete, 0},
		{"own queue kills", true, false, jobqueue.Permanent(errors.New("no")), lifecycle.JobDead, 0},
		{"own queue, store without watch", false, false, nil, lifecycle.JobComplete, 0},
		{"other queue, store watches", true, true, nil, lifecycle.JobComplete, 0},
		{"other queue, store without watch", false, true, nil, lifecycle.JobComplete, 25 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			var s *storage.Store = memstore.New()
			if !tt.watch {
				s = storage.New(noWatch{s})
			}
			q := newQueue(t, s, clk, withGreet(greeter(tt.fail)))
			runner := q
			if tt.other {
				runner = newQueue(t, s, clk, withGreet(greeter(tt.fail)))
			}
			job, err := q.Insert(ctx, greetType, Greet{Name: "Ada"})
			if err != nil {
				t.Fatal(err)
			}
			res := startWait(ctx, q, clk, job.JobID)
			if err := clk.WaitIdle(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-res:
				t.Fatalf("Wait returned before the job ran: %+v", r)
			default:
			}
			if j, err := claim(t, runner, "w1").Run(ctx, nil); err != nil || j.Status != tt.want {
				t.Fatalf("ran to %s, %v", j.Status, err)
			}
			if tt.wantPoll > 0 {
				if err := clk.WaitIdle(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case r := <-res:
					t.Fatalf("Wait returned before its poll: %+v", r)
				default:
				}
				if d, _, err := clk.AdvanceToNext(ctx); err != nil || d != tt.wantPoll {
					t.Fatalf("next timer in %v, %v; want Wait's poll in %v", d, err, tt.wantPoll)
				}
			}
			r := recv(t, res)
			if r.err != nil || r.job.Status != tt.want || r.job.JobID != job.JobID {
				t.Fatalf("Wait: %s, %v; want %s", r.job.Status, r.err, tt.want)
			}
			if moved := clk.Now().Sub(t0); moved != tt.wantPoll {
				t.Fatalf("the clock moved %v, want %v", moved, tt.wantPoll)
			}
		})
	}
}

// TestWaitEnds: Wait gives a *WaitError wrapping the cause when its
// context ends first, ErrNotFound for a job that does not exist, and
// ErrInvalidJob for an id that cannot be one.
func TestWaitEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	q := newQueue(t, memstore.New(), clk, withGreet(greeter(nil)))
	job, err := q.Insert(ctx, greetType, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	res := startWait(cctx, q, clk, job.JobID)
	if err := clk.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	r := recv(t, res)
	var we *jobqueue.WaitError
	if !errors.As(r.err, &we) || !errors.Is(r.err, context.Canceled) || we.Status != lifecycle.JobQueued || we.JobID != job.JobID || r.job.Status != lifecycle.JobQueued {
		t.Fatalf("Wait after cancel: %+v, %v; want a *WaitError of a QUEUED job matching context.Canceled", r.job, r.err)
	}
	if _, err := q.Wait(ctx, "job-nope"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Wait for no job: %v, want ErrNotFound", err)
	}
	if _, err := q.Wait(ctx, "../x"); !errors.Is(err, lifecycle.ErrInvalidJob) {
		t.Fatalf("Wait for a bad id: %v, want ErrInvalidJob", err)
	}
}

// recv is Wait's answer; a Wait that never returns fails the test after
// 10 s of real time instead of hanging it.
func recv(t *testing.T, res <-chan waited) waited {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
		return waited{}
	}
}
