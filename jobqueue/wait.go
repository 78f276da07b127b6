package jobqueue

import (
	"context"
	"fmt"
	"sync"
	"time"

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

// Wait waits until job jobID is COMPLETE or DEAD and returns it as then
// written, acting as the system. It wakes at once when this Queue writes
// the job (a Worker of this process ran it), at the store's signal where
// the store watches (storage.Store.Watch: a write by another process), and
// else on a poll that backs off from 25 ms to 1 s. On a fake clock it
// counts as work while it reads and waits on the clock's timers
// (clock.Activity), so a test that drives the clock sees the same run every
// time.
//
// When ctx ends first it returns the job as last read and a *WaitError
// wrapping the cause (context.Canceled, context.DeadlineExceeded). A job
// that does not exist gives an error matching storage.ErrNotFound; a
// quarantined one a *QuarantinedError.
func (q *Queue) Wait(ctx context.Context, jobID string) (lifecycle.Job, error) {
	key, err := layout.JobKey(jobID)
	if err != nil {
		return lifecycle.Job{}, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	ctx, end := clock.Enter(ctx, q.clock)
	defer end()
	poll := waitPoll
	var signal <-chan struct{}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if ch, err := q.cfg.Store.Watch(wctx, key); err == nil {
		signal, poll = ch, waitPollMax
	}
	var last lifecycle.Job
	for {
		// Registered before the read: a write between the read and the
		// wait still wakes it.
		changed, done := q.waits.add(jobID)
		d, _, err := q.read(ctx, jobID)
		if err != nil {
			done()
			if ctx.Err() != nil {
				return last, &WaitError{JobID: jobID, Status: last.Status, Err: context.Cause(ctx)}
			}
			return lifecycle.Job{}, q.quarantinedOr(ctx, jobID, err)
		}
		last = d.Job
		if d.Status == lifecycle.JobComplete || d.Status == lifecycle.JobDead {
			done()
			return d.Job, nil
		}
		ok := q.waitChange(ctx, changed, signal, poll)
		done()
		if !ok {
			return last, &WaitError{JobID: jobID, Status: last.Status, Err: context.Cause(ctx)}
		}
		poll = min(2*poll, waitPollMax)
	}
}

// waitChange waits until changed is closed, signal has a value, poll
// passes on the clock, or ctx ends (false). A signal is taken, so one
// write wakes the waiter once.
func (q *Queue) waitChange(ctx context.Context, changed <-chan struct{}, signal <-chan struct{}, poll time.Duration) bool {
	t := q.clock.NewTimer(poll)
	defer t.Stop()
	resume := clock.Wait(ctx, q.clock, func() bool {
		return ctx.Err() != nil || isClosed(changed) || len(signal) > 0 || clock.Fired(t)
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

// WaitError is Wait's answer when its ctx ended before the job finished.
// errors.Is sees the cause (context.Canceled, context.DeadlineExceeded).
type WaitError struct {
	JobID  string
	Status lifecycle.JobState // the job's status when last read; "" if never read
	Err    error              // the cause of the context's end
}

// Error names the job, its last status and the cause.
func (e *WaitError) Error() string {
	return fmt.Sprintf("jobqueue: stopped waiting for job %s (last %s): %v", e.JobID, e.Status, e.Err)
}

// Unwrap returns the cause.
func (e *WaitError) Unwrap() error { return e.Err }

// waitSet tells Wait calls of this Queue that their job was written: one
// channel per job with waiters, closed at the job's next write.
type waitSet struct {
	mu   sync.Mutex
	jobs map[string]*waitEntry
}

type waitEntry struct {
	ch chan struct{}
	n  int // waiters holding ch
}

// add returns the channel closed at jobID's next write, and done, to call
// when the caller no longer waits on it.
func (w *waitSet) add(jobID string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.jobs == nil {
		w.jobs = map[string]*waitEntry{}
	}
	e := w.jobs[jobID]
	if e == nil {
		e = &waitEntry{ch: make(chan struct{})}
		w.jobs[jobID] = e
	}
	e.n++
	return e.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if e.n--; e.n == 0 && w.jobs[jobID] == e {
			delete(w.jobs, jobID)
		}
	}
}

// changed wakes the waiters of jobID. The writer calls it while it still
// counts as work on the clock, so a fake clock never sees the waiters idle
// between the write and their wake-up.
func (w *waitSet) changed(jobID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.jobs[jobID]; e != nil {
		close(e.ch)
		delete(w.jobs, jobID)
	}
}
