package run

import (
	"context"
	"log/slog"
	"sync"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/pacing"
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
		return errRunnerStarted
	}
	// The loop counts as work on the clock except while it waits below (a
	// test's fake clock moves only when the runner is idle; activity.Activity).
	ctx, end := activity.Enter(ctx, r.cfg.Clock)
	defer end()
	r.life.begin(ctx)
	defer r.shutdown()
	sched := pacing.Poll{Idle: r.cfg.PollInterval}
	found := false
	r.pass(ctx, func(pctx context.Context) { found = r.sched.poll(pctx, true) })
	// The poll keeps its own schedule: a steady stream of handed runs must
	// not starve it, or orphans and other runners' runs would wait forever.
	t := r.cfg.Clock.NewTimer(sched.Next(found))
	defer func() { t.Stop() }()
	for {
		// Ready once anything would wake it: a handed run (kept until the
		// loop takes it, so the wake-up is never lost to the count).
		poll := t // t changes once the loop resumes; the ready function may run later
		resume := activity.Wait(ctx, r.cfg.Clock, func() bool { return ctx.Err() != nil || r.inbox.hasHanded() || activity.Fired(poll) })
		select {
		case <-ctx.Done():
			resume()
			return nil
		case <-r.inbox.woken():
			resume()
			r.pass(ctx, r.sched.considerHanded)
		case <-t.C():
			resume()
			r.pass(ctx, func(pctx context.Context) { found = r.sched.poll(pctx, false) })
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
	r.life.wait()
	grace, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownGrace)
	defer cancel()
	if n := r.units.Wait(grace); n > 0 {
		r.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "shutdown_with_stragglers", slog.Int("goroutines", n),
			slog.Duration("grace", r.cfg.ShutdownGrace))
	}
}

// lifetime is Run's: its context, which executions and the backfill live
// as long as (not as long as the pass that started them), and the
// goroutines that Run waits for at shutdown.
type lifetime struct {
	mu  sync.Mutex
	ctx context.Context
	wg  sync.WaitGroup
}

func (l *lifetime) begin(ctx context.Context) {
	l.mu.Lock()
	l.ctx = ctx
	l.mu.Unlock()
}

// context is Run's context (Background before Run).
func (l *lifetime) context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		return context.Background()
	}
	return l.ctx
}

// add counts a goroutine Run waits for; it calls done when it ends.
func (l *lifetime) add()  { l.wg.Add(1) }
func (l *lifetime) done() { l.wg.Done() }
func (l *lifetime) wait() { l.wg.Wait() }
