package conveyor

import (
	"context"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/maintenance"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// RetentionConfig says what finished history the Client deletes, and
// when (docs/retention.md). Its zero value deletes nothing.
//
// Every process sharing the Store runs the retention pass: one of them
// makes it each Interval, page by page, and another resumes it where a
// process that died stopped.
type RetentionConfig struct {
	// Age is how long everything finished is kept; 0 (the default) turns
	// retention off, except for the kinds Ages names. A kind without an
	// entry in Ages is kept for Age, but for these, which follow their own
	// defaults once Age is set: dead_jobs and artifacts are kept,
	// idempotency records are deleted as soon as their expires_at has
	// passed, and the job queue's rollups are kept 48 h (hours) and 90
	// days (days).
	Age time.Duration
	// Ages overrides Age for a kind, by name: "runs" (finished runs, aged
	// from finished_at), "audit" (audit days, from the day's end), "jobs"
	// (COMPLETE jobs and finished NLM jobs, from updated_at), "dead_jobs",
	// "idempotency" (from expires_at), "inbox" (expired entries, from the
	// end of their TTL), "artifacts" (from created_at, deleted by the
	// admin's cleanup), "stats_hours" and "stats_days" (the job queue's
	// rollups of the audit log behind its counts and charts, from the
	// hour's or day's end, each kept while the counts may need it),
	// "proposals" (applied or rejected, from decided_at; pending ones are
	// kept). An age is ≥ 0, or -1 to keep the kind; an entry
	// applies even while Age is 0.
	Ages map[string]time.Duration
	// Interval is how often a pass is due, across every process sharing
	// the store. Default 1 h.
	Interval time.Duration
	// Check is how often a process asks whether a pass is due (one read of
	// the pass's lease record). Default Interval/4, at least 1 s.
	Check time.Duration
	// Page is how many keys one listing of a pass reads before the pass
	// records where it is. Default 500.
	Page int
	// LeaseTTL is how long the pass's lease lasts unless renewed; another
	// process resumes a pass whose process died once it lapsed. Default
	// 5 min.
	LeaseTTL time.Duration
}

// SchedulerConfig tunes the firing of Config.Schedules.
type SchedulerConfig struct {
	// Grace is how late a slot may be fired and still count as on time,
	// not missed (beyond its jitter). Default 1 min.
	Grace time.Duration
	// PollInterval bounds the wait between two looks at the schedules'
	// state, so a pause, a resume or a slot fired elsewhere is noticed.
	// Default 30 s.
	PollInterval time.Duration
	// RetryInterval is how soon a schedule is looked at again after a
	// firing did not finish. Default 1 s (at most PollInterval).
	RetryInterval time.Duration
}

// janitor is the retention janitor's config: r with the Client's shared
// fields.
func (r RetentionConfig) janitor(store *storage.Store, owner string, clk clock.Clock, log *slog.Logger) retention.Config {
	return retention.Config{Store: store, Owner: owner, Clock: clk, Logger: log,
		Age: r.Age, Ages: retention.ByName(r.Ages), Interval: r.Interval, Check: r.Check, Page: r.Page, LeaseTTL: r.LeaseTTL}
}

// scheduler is the Scheduler's config: s, the schedules and the Client's
// shared fields.
func (s SchedulerConfig) scheduler(runner *run.Runner, queue *jobqueue.Queue, store *storage.Store, schedules []lifecycle.Schedule, clk clock.Clock, log *slog.Logger) schedule.Config {
	sc := schedule.Config{Runner: runner, Queue: queue, Store: store, Clock: clk, Logger: log,
		Grace: s.Grace, PollInterval: s.PollInterval, RetryInterval: s.RetryInterval}
	sc.Schedules = schedules
	return sc
}

// inboxExpiry is a maintenance service: it moves the inbox entries past
// their TTL to inbox/expired/ every Config.InboxExpiry
// (docs/spec.md#inbox-entry-lifecycle), in every process.
type inboxExpiry struct {
	maintenance.Base
	box *inbox.Box
}

func newInboxExpiry(box *inbox.Box, every time.Duration, clk clock.Clock, log *slog.Logger) *inboxExpiry {
	if every == 0 {
		every = DefaultInboxExpiry
	}
	return &inboxExpiry{box: box, Base: maintenance.Base{Name: "inbox_expiry", Clock: clk, Logger: log, Period: every}}
}

// RunOnce expires the entries due and, in the same listing, retries the
// jobs of pending entries whose dispatch failed (Config.InboxJobs).
func (e *inboxExpiry) RunOnce(ctx context.Context) error {
	_, err := e.box.ExpireDue(ctx, lifecycle.ActorSystem)
	return err
}
