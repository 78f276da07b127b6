package jobqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// Wait's poll of the job, the fallback for writes by other processes the
// store cannot signal: waitPoll after the first read, twice as long after
// each read that found the job unfinished, up to waitPollMax. Over a store
// that watches, the first poll waits waitPollMax: the watch is the fast path.
const (
	waitPoll    = 25 * time.Millisecond
	waitPollMax = time.Second
)

// wait is Queue.Wait.
func (q *reader) wait(ctx context.Context, jobID string) (lifecycle.Job, error) {
	key, err := layout.JobKey(jobID)
	if err != nil {
		return lifecycle.Job{}, fmt.Errorf("%w: %w", lifecycle.ErrInvalidJob, err)
	}
	ctx, end := activity.Enter(ctx, q.clock)
	defer end()
	poll := waitPoll
	var signal <-chan struct{}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if ch, err := q.watch.Watch(wctx, key); err == nil { // else (errors.ErrUnsupported) it polls
		signal, poll = ch, waitPollMax
	}
	var last lifecycle.Job
	for {
		// Registered before the read: a write between the read and the
		// wait still wakes it.
		changed, done := q.waits.add(jobID)
		d, _, err := q.jobs.read(ctx, jobID)
		if err == nil {
			err = confine(ctx, &d.Job)
		}
		if err != nil {
			done()
			if ctx.Err() != nil {
				return last, &waitError{JobID: jobID, Status: last.Status, Err: context.Cause(ctx)}
			}
			return lifecycle.Job{}, q.quar.quarantinedOr(ctx, jobID, err)
		}
		last = d.Job
		if d.Status == lifecycle.JobComplete || d.Status == lifecycle.JobDead || d.Status == lifecycle.JobCancelled {
			done()
			return d.Job, nil
		}
		ok := q.waitChange(ctx, changed, signal, poll)
		done()
		if !ok {
			return last, &waitError{JobID: jobID, Status: last.Status, Err: context.Cause(ctx)}
		}
		poll = min(2*poll, waitPollMax)
	}
}

// waitChange waits until changed is closed, signal has a value, poll
// passes on the clock, or ctx ends (false). A signal is taken, so one
// write wakes the waiter once.
func (q *reader) waitChange(ctx context.Context, changed <-chan struct{}, signal <-chan struct{}, poll time.Duration) bool {
	t := q.clock.NewTimer(poll)
	defer t.Stop()
	resume := activity.Wait(ctx, q.clock, func() bool {
		return ctx.Err() != nil || isClosed(changed) || len(signal) > 0 || activity.Fired(t)
	})
	defer resume()
	select {
	case <-ctx.Done():
		return false
	case <-changed:
	case <-signal:
	case <-t.C():
	}
	// The same write may have both closed changed and signalled: the
	// signal is taken now, not left to wake the next wait for nothing.
	select {
	case <-signal:
	default:
	}
	return true
}

// waitError is Wait's answer when its ctx ended before the job finished.
// errors.Is sees the cause (context.Canceled, context.DeadlineExceeded).
type waitError struct {
	JobID  string
	Status lifecycle.JobState // the job's status when last read; "" if never read
	Err    error              // the cause of the context's end
}

// Error names the job, its last status and the cause.
func (e *waitError) Error() string {
	return fmt.Sprintf("jobqueue: stopped waiting for job %s (last %s): %v", e.JobID, e.Status, e.Err)
}

// Unwrap returns the cause.
func (e *waitError) Unwrap() error { return e.Err }

// sleep waits d on clk, or until wake is closed; false when ctx ended.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration, wake <-chan struct{}) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	defer activity.Wait(ctx, clk, func() bool { return ctx.Err() != nil || activity.Fired(t) || isClosed(wake) })()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
	case <-wake:
	}
	return true
}

// isClosed tells whether wake, a channel only ever closed, is; a nil one
// never is.
func isClosed(wake <-chan struct{}) bool {
	if wake == nil {
		return false
	}
	select {
	case <-wake:
		return true
	default:
		return false
	}
}
