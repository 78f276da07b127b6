package run

import (
	"context"
	"errors"
	"log/slog"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// Run executes runs until ctx is done, then waits for the runs it is
// executing to stop and returns nil. Runs cut short by the shutdown keep
// their lease until it lapses; then any runner (this one restarted, with the
// same Owner, at once) takes them over and resumes them from their
// checkpoints. Step goroutines that ignore their context are waited for at
// most ShutdownGrace. Run first recovers the runs that are not terminal
// (docs/spec.md#recovery), then takes work as Submit hands it over, and
// looks in the store for the rest: soon after a look that found runs to
// move, up to PollInterval apart while it finds none.
func (r *Runner) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrRunnerStarted
	}
	// The loop counts as work on the clock except while it waits below (a
	// test's fake clock moves only when the runner is idle; clock.Activity).
	ctx, end := clock.Enter(ctx, r.cfg.Clock)
	defer end()
	r.mu.Lock()
	r.life = ctx
	r.mu.Unlock()
	defer r.shutdown()
	sched := core.Poll{Idle: r.cfg.PollInterval}
	found := false
	r.pass(ctx, func(pctx context.Context) { found = r.poll(pctx, true) })
	// The poll keeps its own schedule: a steady stream of handed runs must
	// not starve it, or orphans and other runners' runs would wait forever.
	t := r.cfg.Clock.NewTimer(sched.Next(found))
	defer func() { t.Stop() }()
	for {
		// Ready once anything would wake it: a handed run (kept until the
		// loop takes it, so the wake-up is never lost to the count).
		poll := t // t changes once the loop resumes; the ready function may run later
		resume := clock.Wait(ctx, r.cfg.Clock, func() bool { return ctx.Err() != nil || r.hasHanded() || clock.Fired(poll) })
		select {
		case <-ctx.Done():
			resume()
			return nil
		case <-r.wake:
			resume()
			r.pass(ctx, func(pctx context.Context) {
				for _, c := range r.takeHanded() {
					runID := c.w.snapshot().RunID
					r.mu.Lock()
					_, busy := r.executing[runID]
					if busy {
						// Handed over (a Deliver, an Approve) while this
						// runner still ends the run's last execution (it
						// parks): look again when that execution ends.
						r.rehand[runID] = c
					}
					r.mu.Unlock()
					if !busy {
						r.consider(pctx, c, false)
					}
				}
			})
		case <-t.C():
			resume()
			r.pass(ctx, func(pctx context.Context) { found = r.poll(pctx, false) })
			t = r.cfg.Clock.NewTimer(sched.Next(found))
		}
	}
}

// pass runs one pass of the loop under PollTimeout (wall-clock), so a
// store that hangs or is down delays the loop by at most that much: the
// pass's store calls wait out transient errors until then and give up, and
// the next pass starts over from the store.
func (r *Runner) pass(ctx context.Context, fn func(context.Context)) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PollTimeout)
	defer cancel()
	fn(pctx)
}

// shutdown waits for this runner's executions to stop, then for abandoned
// step goroutines at most ShutdownGrace (wall-clock).
func (r *Runner) shutdown() {
	r.wg.Wait()
	grace, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownGrace)
	defer cancel()
	if n := r.units.Wait(grace); n > 0 {
		r.log.LogAttrs(context.Background(), slog.LevelWarn, "shutdown_with_stragglers", slog.Int("goroutines", n),
			slog.Duration("grace", r.cfg.ShutdownGrace))
	}
}

// lifeCtx is Run's context: executions live as long as the runner, not as
// long as the pass that started them.
func (r *Runner) lifeCtx() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.life == nil {
		return context.Background()
	}
	return r.life
}

var errNoSlot = errors.New("run: no free slot")

// hand gives the loop a run to consider, without blocking.
func (r *Runner) hand(c candidate) {
	r.mu.Lock()
	r.handed = append(r.handed, c)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// hasHanded tells whether runs wait in the queue of handed runs.
func (r *Runner) hasHanded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.handed) > 0
}

// takeHanded empties the queue of handed runs.
func (r *Runner) takeHanded() []candidate {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.handed
	r.handed = nil
	return h
}
