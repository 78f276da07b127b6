package retention

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Kind is a kind of finished history the janitor deletes.
type Kind string

// The kinds, in the order a pass goes through them.
const (
	// Runs are finished runs (a terminal status with finished_at): the
	// whole run folder and its index entries, aged from finished_at.
	Runs Kind = "runs"
	// Audit is the audit log by day folder (audit/YYYYMMDD/), aged from
	// the day's end.
	Audit Kind = "audit"
	// Jobs are COMPLETE and CANCELLED jobs (jobs/; CANCELLED, the general
	// job machine's, is as final) and finished NLM jobs (DONE or ERROR,
	// nlm/jobs/, with their nlm/active/ entry), aged from updated_at.
	Jobs Kind = "jobs"
	// DeadJobs are DEAD jobs, aged from updated_at. They are the
	// operator's to requeue, so by default they are kept.
	DeadJobs Kind = "dead_jobs"
	// Idempotency records are aged from their expires_at
	// (docs/spec.md#idempotency: completed 24 h, failed 1 h after their
	// last write; a processing record from the later of it and its
	// lease's expiry): past it a submit takes the key over anyway. The
	// run markers of a store that settles go with them, aged from theirs.
	Idempotency Kind = "idempotency"
	// Inbox entries that expired (inbox/expired/), aged from the end of
	// their TTL (created_at + ttl_hours).
	Inbox Kind = "inbox"
	// Artifacts (projects/{cid}/artifacts/), aged from created_at, are
	// deleted by the artifact store's admin cleanup, the only deletion
	// docs/spec.md#artifact allows, with this kind's age as its cleanup
	// age; by default they are kept.
	Artifacts Kind = "artifacts"
	// StatsHours are the job queue's hourly rollups of the audit log
	// (stats/jobs/hours/), aged from the hour's end, and deleted only once
	// the rollup of their day exists (counts may build it from them).
	// Once Age is set they are kept DefaultStatsHours: the charts read the
	// last hour, the counts the hours since the last closed day.
	StatsHours Kind = "stats_hours"
	// StatsDays are the job queue's daily rollups (stats/jobs/days/),
	// aged from the day's end, and deleted only once the next day's
	// exists (the counts start from the latest). Once Age is set they are
	// kept DefaultStatsDays.
	StatsDays Kind = "stats_days"
	// Proposals are applied or rejected proposals (proposals/), aged from
	// decided_at; pending ones are the gateway's to decide and are kept.
	// The pass also removes an entry of the pending index whose proposal
	// was decided or never written (a writer that died between the two),
	// once it is older than the kind's settle margin.
	Proposals Kind = "proposals"
)

// Kinds returns every kind, in the order a pass goes through them.
func Kinds() []Kind {
	return []Kind{Runs, Audit, Jobs, DeadJobs, Idempotency, Inbox, Artifacts, StatsHours, StatsDays, Proposals}
}

// ByName returns ages by kind name (the form of the Client's config) as
// Config.Ages; nil for nil. New refuses a name that is no kind.
func ByName(ages map[string]time.Duration) map[Kind]time.Duration {
	if ages == nil {
		return nil
	}
	m := make(map[Kind]time.Duration, len(ages))
	for k, a := range ages {
		m[Kind(k)] = a
	}
	return m
}

// Forever, as a kind's age, keeps that kind.
const Forever time.Duration = -1

// Config configures a Janitor. Its zero value (with Store and Owner set)
// is a janitor that deletes nothing: retention is off unless Age or Ages
// say otherwise.
type Config struct {
	// Store is the store to clean; required.
	Store *storage.Store
	// Owner names this process in the janitor's lease (a valid id, unique
	// per process sharing the store); required.
	Owner string

	// Age is how long everything finished is kept; 0 (the default) turns
	// retention off, except for the kinds Ages names. A kind without an
	// entry in Ages is kept for Age, but for these, which follow their own
	// defaults once Age is set: DeadJobs and Artifacts are kept (Forever),
	// Idempotency records are deleted as soon as their expires_at has
	// passed (0), and the rollups are kept DefaultStatsHours and
	// DefaultStatsDays.
	Age time.Duration
	// Ages overrides Age for a kind: a duration ≥ 0, or Forever to keep
	// the kind. An entry applies even while Age is 0.
	Ages map[Kind]time.Duration

	// Interval is how often a pass is due, across every process sharing
	// the store: one of them makes it. Default 1 h.
	Interval time.Duration
	// Check is how often Run asks whether a pass is due (one read of the
	// lease record). Default Interval/4.
	Check time.Duration
	// Page is how many keys one listing of a pass reads before it records
	// its cursor; default 500.
	Page int
	// IdempotencyFullListing is how often a pass lists every idempotency
	// record rather than only those its expiry index files under hours
	// past: the records without an entry (written before the index, by an
	// older release during a rolling upgrade, or by a submit that stopped
	// between its record and its entry) are deleted at most this late.
	// Default 24 h.
	IdempotencyFullListing time.Duration
	// LeaseTTL is how long the janitor's lease lasts unless renewed; a
	// janitor renews it as it goes, and another process resumes a pass
	// whose janitor died once the lease lapsed. Default 5 min.
	LeaseTTL time.Duration

	// Clock is the clock ages are judged on and waits are made on;
	// default clock.Real().
	Clock clock.Clock
	// Logger receives a retention_pass line per pass (INFO) and trouble
	// (WARN); default slog.Default().
	Logger *slog.Logger
	// Metrics, when set, observes every pass (Report).
	Metrics Metrics
}

// Metrics observes the janitor's passes. Implementations must be safe for
// concurrent use.
type Metrics interface {
	// RetentionPass observes the work of one call that held the lease: a
	// whole pass, or the part of one a janitor did before it stopped (its
	// context ended, the store failed, it lost the lease), Done false.
	RetentionPass(r Report)
}

// Default values of Config.
const (
	DefaultInterval = time.Hour
	DefaultPage     = 500
	DefaultLeaseTTL = 5 * time.Minute
	// DefaultIdempotencyFullListing: see Config.IdempotencyFullListing.
	DefaultIdempotencyFullListing = 24 * time.Hour
	// DefaultStatsHours and DefaultStatsDays are how long the job queue's
	// rollups are kept once Age is set: two days of hours (the charts
	// and counts read the last day's at most), 90 days of days (the
	// counts read the latest; the rest is history kept a quarter).
	DefaultStatsHours = 48 * time.Hour
	DefaultStatsDays  = 90 * 24 * time.Hour
)

// AgeOf returns the age kind k is kept for under c: a duration ≥ 0, or
// Forever.
func (c *Config) AgeOf(k Kind) time.Duration {
	if a, ok := c.Ages[k]; ok {
		return a
	}
	if c.Age <= 0 {
		return Forever
	}
	switch k {
	case DeadJobs, Artifacts:
		return Forever
	case Idempotency:
		return 0
	case StatsHours:
		return DefaultStatsHours
	case StatsDays:
		return DefaultStatsDays
	}
	return c.Age
}

// Enabled tells whether c deletes any kind.
func (c *Config) Enabled() bool {
	for _, k := range Kinds() {
		if c.AgeOf(k) >= 0 {
			return true
		}
	}
	return false
}

func (c *Config) withDefaults() (Config, error) {
	d := *c
	if d.Store == nil {
		return d, fmt.Errorf("retention: Config.Store is required")
	}
	if err := storekey.ValidateID("janitor owner", d.Owner); err != nil {
		return d, err
	}
	if d.Age < 0 {
		return d, fmt.Errorf("retention: Age %s is negative (0 turns retention off)", d.Age)
	}
	for _, k := range slices.Sorted(maps.Keys(d.Ages)) {
		if !slices.Contains(Kinds(), k) {
			return d, fmt.Errorf("retention: unknown kind %q in Ages", k)
		}
		if a := d.Ages[k]; a < 0 && a != Forever {
			return d, fmt.Errorf("retention: age %s of %s is negative (use Forever to keep)", a, k)
		}
	}
	if d.Interval <= 0 {
		d.Interval = DefaultInterval
	}
	if d.Check <= 0 {
		d.Check = max(d.Interval/4, time.Second)
	}
	if d.Page <= 0 {
		d.Page = DefaultPage
	}
	if d.LeaseTTL <= 0 {
		d.LeaseTTL = DefaultLeaseTTL
	}
	if d.IdempotencyFullListing <= 0 {
		d.IdempotencyFullListing = DefaultIdempotencyFullListing
	}
	if d.Clock == nil {
		d.Clock = clock.Real()
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d, nil
}
