package jobqueue

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/maintenance"
	"github.com/runconveyor/conveyor/internal/pacing"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Worker runs jobs from a Queue: Slots loops, each claiming a job, running
// it and claiming the next. Without work a loop waits until the Queue has
// an agent due (work this process enqueued wakes it at once), the store
// signals a change of the ready lanes (where the Store watches: work
// other processes enqueue wakes it too) or PollInterval passes; the
// worker sweeps the queue every SweepInterval.
//
// Over a store that cannot watch (S3), one goroutine of the Worker polls
// the ready lanes on an adaptive schedule: 25 ms after a listing found
// new work and for the 10 listings after it, then
// twice as long after every further listing that found none, up to
// PollInterval. So a stream of work from other processes
// is found within tens of milliseconds, while an idle Worker lists the
// lanes once per PollInterval, the worst case before it finds work enqueued
// elsewhere after idleness; the loops wait for the work it finds and make
// no listings of their own while idle (docs/performance.md).
type Worker struct {
	// Queue to run. Required.
	Queue *Queue
	// ID names the worker in leases; unique among the workers sharing the
	// store. Required.
	ID string
	// Handlers run the NLM pipeline of the built-in job types (RESEARCH,
	// BRIEF, PROPOSAL_PREPROCESS), and the jobs of user types registered
	// without a Handler (Config.Types). Not needed when every job type has
	// its own Handler.
	Handlers Handlers
	// Slots is how many jobs' handlers the worker runs at once: of
	// different agents (an agent runs one job at a time), or of a job
	// type's lane, as many as its TypeConfig caps allow. A slot claims its
	// next job once a handler returns, while that job's end is still
	// being written (at most one such end a slot); the agent, and the
	// type's caps, count the job until its end is written. Default 1.
	Slots int
	// PollInterval is the longest wait after finding no work: how soon work
	// enqueued by other processes is found after idleness, and, over a
	// store that cannot watch, the period of an idle Worker's one listing.
	// Default 1 s.
	PollInterval time.Duration
	// SweepInterval is how often the workers sharing the store sweep the
	// queue: each worker calls Queue.SweepIfDue this often, and one batch
	// (Config.SweepBatch jobs) per interval is swept among them all.
	// Negative disables it. Default 1 min.
	SweepInterval time.Duration
}

// Run works until ctx is done, then returns nil. A job running at that
// moment sees its handlers' context cancelled, which counts as a failed
// attempt: it goes to RETRY_BACKOFF like any other failure.
func (w *Worker) Run(ctx context.Context) error {
	if w.Queue == nil || w.ID == "" || (w.Handlers.CallNotebookLM == nil && len(w.Queue.cfg.Types) == 0) {
		return errors.New("jobqueue: Worker needs Queue, ID, and Config.Types or Handlers.CallNotebookLM to run jobs with")
	}
	if err := storekey.ValidateID("worker id", w.ID); err != nil {
		return err
	}
	// Each goroutine of the worker counts as work on the clock but while it
	// waits (a test's fake clock moves only when the worker is idle;
	// activity.Activity). The store's watch signals arrive from outside: not
	// counted.
	clk := w.Queue.clock
	slots, poll, sweep := w.settings()
	defer w.stop(ctx)
	var wg sync.WaitGroup
	watched := w.watchLanes(ctx, &wg)
	// Over a store that cannot watch, the lane poll finds others' work and
	// wakes the loops: their own fallback look is then as rare as the
	// sweep's, or every loop's look would add to an idle Worker's listings.
	wait := poll
	if !watched {
		wait = max(poll, idleFallback)
	}
	for range slots {
		lctx := activity.Start(ctx, clk)
		wg.Go(func() {
			ctx, end := activity.Enter(lctx, clk)
			defer end()
			w.loop(ctx, wait)
		})
	}
	if !watched {
		pctx := activity.Start(ctx, clk)
		wg.Go(func() {
			ctx, end := activity.Enter(pctx, clk)
			defer end()
			w.pollLanes(ctx, poll)
		})
	}
	// The callbacks of the jobs that ended: posted by every Worker, each
	// entry once between them (callback_send.go).
	cctx := activity.Start(ctx, clk)
	wg.Go(func() {
		ctx, end := activity.Enter(cctx, clk)
		defer end()
		w.Queue.callbacks.run(ctx, w.ID, callbackPeriod)
	})
	if sweep > 0 {
		sctx := activity.Start(ctx, clk)
		wg.Go(func() {
			ctx, end := activity.Enter(sctx, clk)
			defer end()
			_ = maintenance.Run(ctx, w.Queue.sweeper.every(w.ID, sweep))
		})
	}
	wg.Wait()
	return nil
}

// settings returns the Worker's slots, poll and sweep intervals, with
// their defaults filled in.
func (w *Worker) settings() (slots int, poll, sweep time.Duration) {
	slots = max(w.Slots, 1)
	poll = w.PollInterval
	if poll <= 0 {
		poll = time.Second
	}
	sweep = w.SweepInterval
	if sweep == 0 {
		sweep = time.Minute
	}
	return slots, poll, sweep
}

// stop, when Run returns, releases the agent locks the claims kept and
// waits for the handlers still running, up to StopGrace.
func (w *Worker) stop(ctx context.Context) {
	// The agent locks the claims kept past their end: released, so
	// other processes take the agents at once (see Claim.end).
	rctx, rcancel := w.Queue.grace.after(ctx)
	defer rcancel()
	defer w.Queue.locks.releaseKept(rctx)
	// Handlers that ignore their context are left behind, not waited
	// for past StopGrace (the units count and log them).
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.Queue.cfg.StopGrace)
	defer cancel()
	if n := w.Queue.units.Wait(grace); n > 0 {
		w.Queue.log.WarnContext(ctx, "jobqueue: stopped with handlers still running", "worker", w.ID, "handlers", n)
	}
}

// watchLanes, if the store signals changes, starts in wg a goroutine that
// passes the lanes' changes on to the Queue, and reports whether it did.
func (w *Worker) watchLanes(ctx context.Context, wg *sync.WaitGroup) (watched bool) {
	// Work other processes enqueue is found at the store's signal, not at
	// the next poll; polling stays as the fallback.
	// Marked as the Queue's: its own lane writes need not wake it (mine).
	ch, err := w.Queue.cfg.Store.Watch(w.Queue.lanes.mine(ctx), layout.LanesPrefix)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		w.Queue.log.DebugContext(ctx, "jobqueue: the store cannot watch; polling the lanes", "worker", w.ID)
		return false
	case err != nil:
		w.Queue.log.WarnContext(ctx, "jobqueue: watching the lanes; polling only", "worker", w.ID, "err", err)
		return false
	}
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-ch:
				if !ok {
					return
				}
				w.Queue.lanes.lanesChanged()
			}
		}
	})
	return true
}

// sleep waits d, or less if wake is closed (a nil wake never is). It
// returns false when ctx is done.
func (w *Worker) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	return sleep(ctx, w.Queue.clock, d, wake)
}

// waitWork waits until an agent of the Queue is due, this process
// enqueues work, or poll passes (work other processes enqueue is found by
// polling). It returns false when ctx is done.
func (w *Worker) waitWork(ctx context.Context, poll time.Duration) bool {
	due, wake := w.Queue.sched.nextDue()
	d := poll
	if !due.IsZero() {
		d = min(d, max(due.Sub(w.Queue.clock.Now()), 0))
	}
	if w.Queue.lanes.signalled() {
		d = min(d, watchRelist) // a signal not yet acted on: list soon
	}
	return w.sleep(ctx, d, wake)
}

// noAssembly tells whether the handlers that run a job of type t assemble
// no context (see claimer.claimFor): the type's own, or the Worker's.
func (w *Worker) noAssembly(t lifecycle.JobType) bool {
	return !assembles(w.Queue.runner.handlerFor(t, w.Handlers))
}

// busyPoll is the shortest spacing of the lane poll's listings (see
// pacing.Poll, whose schedule the poll follows).
const busyPoll = pacing.BusyPoll

// idleFallback is how long a Worker loop waits, with no agent due, before
// it looks for work itself, when a lane poll looks for it: a safety net
// only, as rare as the default sweep.
const idleFallback = time.Minute

// pollLanes lists the ready lanes on the adaptive schedule of pacing.Poll,
// for a Worker whose store cannot watch: work it finds is scheduled in the
// Queue, which wakes the waiting loops.
func (w *Worker) pollLanes(ctx context.Context, poll time.Duration) {
	sched := pacing.Poll{Idle: poll}
	wait := poll
	seen := w.Queue.lanes.foundWork()
	for w.sleep(ctx, wait, nil) {
		if err := w.Queue.lanes.pollLanes(ctx); err != nil && ctx.Err() == nil {
			w.Queue.log.WarnContext(ctx, "jobqueue: polling the lanes", "worker", w.ID, "err", err)
		}
		// New work found by any listing since the last look, this one or a
		// claim's: more may follow soon.
		n := w.Queue.lanes.foundWork()
		wait = sched.Next(n != seen)
		seen = n
	}
}

// loop is one slot: it claims a job, runs it and claims the next. The
// next claim starts once the handler has returned, while the job's end
// (its artifact, record and audit commit, the agent lock kept or freed)
// is still being written, as River's completer frees its executors: a
// slot's handler does not wait on its predecessor's fsync. A slot has at
// most one such end in flight, so at most Slots handlers run and at most
// Slots ends are written at once; the agent stays busy until its job's
// end is written, so its next job waits for it as before.
func (w *Worker) loop(ctx context.Context, poll time.Duration) {
	clk := w.Queue.clock
	var ending chan struct{} // closed once the previous job's Run returned
	defer func() { w.waitClosed(ctx, ending, false) }()
	for ctx.Err() == nil {
		c, err := w.Queue.claims.claimFor(ctx, w.ID, w.noAssembly)
		if err != nil && ctx.Err() == nil {
			w.Queue.log.WarnContext(ctx, "jobqueue: claim", "worker", w.ID, "err", err)
		}
		if c == nil {
			if !w.waitWork(ctx, poll) {
				return
			}
			continue
		}
		worked, done := make(chan struct{}), make(chan struct{})
		c.worked = func() { close(worked) }
		rctx := activity.Start(ctx, clk)
		go func() {
			ctx, end := activity.Enter(rctx, clk)
			defer end()
			defer close(done)
			if _, err := c.Run(ctx, w.Handlers); err != nil && ctx.Err() == nil {
				w.Queue.log.WarnContext(ctx, "jobqueue: run", "worker", w.ID, "job_id", c.Job().JobID, "err", err)
			}
			c.worked.fire() // a run that ended before its handler
		}()
		prev := ending
		ending = done // the deferred wait covers this run from here on
		w.waitClosed(ctx, worked, true)
		w.waitClosed(ctx, prev, false)
	}
}

// waitClosed waits until ch (nil: nothing to wait for) is closed, or, if
// orDone, ctx is done, counting as idle on the Queue's clock meanwhile.
func (w *Worker) waitClosed(ctx context.Context, ch chan struct{}, orDone bool) {
	if ch == nil {
		return
	}
	resume := activity.Wait(ctx, w.Queue.clock, func() bool { return isClosed(ch) || (orDone && ctx.Err() != nil) })
	defer resume()
	if orDone {
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return
	}
	<-ch
}
