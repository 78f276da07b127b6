package retention

import (
	"encoding/json"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
)

// S3Rule is one rule of a bucket lifecycle configuration, in the JSON of
// S3's PutBucketLifecycleConfiguration (aws s3api
// put-bucket-lifecycle-configuration --lifecycle-configuration file://...;
// MinIO's mc ilm import reads the same).
type S3Rule struct {
	ID         string       `json:"ID"`
	Status     string       `json:"Status"`
	Filter     S3Filter     `json:"Filter"`
	Expiration S3Expiration `json:"Expiration"`
}

// S3Filter selects a rule's objects by key prefix.
type S3Filter struct {
	Prefix string `json:"Prefix"`
}

// S3Expiration deletes an object Days after its last write.
type S3Expiration struct {
	Days int `json:"Days"`
}

// S3LifecycleConfiguration is the document S3Lifecycle builds.
type S3LifecycleConfiguration struct {
	Rules []S3Rule `json:"Rules"`
}

// completedTTL is the TTL of a completed idempotency record
// (docs/spec.md#idempotency),
// the longest: the record's expires_at is that long after its last write.
const completedTTL = 24 * time.Hour

// S3Lifecycle returns the bucket lifecycle configuration that applies
// c's ages by the age of each object's last write, for a bucket whose
// janitor is off. A rule cannot read a record, so it cannot tell a
// finished record from one in flight that was not written for as long:
//
//   - runs: one rule per agent, for agents/{slug}/runs/, and one each for
//     index/runs/, index/run-history/, index/run-status/ and
//     index/repo-runs/ (the agents'
//     slots, beside their runs, are kept);
//   - jobs: jobs/ and nlm/jobs/ only when DeadJobs is not kept (a rule
//     cannot spare DEAD jobs), with the longer of the two ages;
//   - idempotency/ and its expiry index (index/idempotency-expiry/):
//     the age plus the 24 h a completed record lives;
//   - audit/, inbox/expired/, and projects/ for artifacts;
//   - the job queue's rollups, stats/jobs/hours/ and stats/jobs/days/,
//     by age alone (a rule cannot see whether the counts still need one:
//     a day older than its age with no later day is deleted too, and the
//     counts make it again from the hours and audit objects left).
//
// Days are whole days, rounded up, at least 1. A kind kept (Forever) has
// no rule. keyPrefix is the store's prefix in the bucket (s3store's
// Prefix, "" for none), put before every rule's.
func S3Lifecycle(c Config, keyPrefix string, agents []string) ([]byte, error) {
	var cfg S3LifecycleConfiguration
	add := func(id, prefix string, age time.Duration) {
		if age < 0 {
			return
		}
		days := max(int((age+24*time.Hour-1)/(24*time.Hour)), 1)
		cfg.Rules = append(cfg.Rules, S3Rule{ID: "conveyor-" + id, Status: "Enabled", Filter: S3Filter{Prefix: keyPrefix + prefix}, Expiration: S3Expiration{Days: days}})
	}
	runs := c.AgeOf(Runs)
	for _, slug := range agents {
		p, err := layout.AgentRunsPrefix(slug)
		if err != nil {
			return nil, err
		}
		add("runs-"+slug, p, runs)
	}
	if len(agents) > 0 {
		add("run-index", layout.RunIndexPrefix, runs)
		// The history lists: an entry of a run still active that expires
		// is put back by the Runner's index repair pass.
		add("run-history", layout.RunHistoryPrefix, runs)
		add("run-status", layout.RunStatusIndexPrefix, runs)
		// A repository's runs, across agents: as the history lists (the
		// janitor deletes an entry with its run; with no janitor nothing
		// else would).
		add("repo-runs", layout.RepoRunsPrefix, runs)
	}
	add("audit", layout.AuditPrefix, c.AgeOf(Audit))
	if jobs, dead := c.AgeOf(Jobs), c.AgeOf(DeadJobs); jobs >= 0 && dead >= 0 {
		add("jobs", layout.JobsPrefix, max(jobs, dead))
		add("nlm-jobs", layout.NLMJobsPrefix, max(jobs, dead))
	}
	if a := c.AgeOf(Idempotency); a >= 0 {
		add("idempotency", layout.IdempotencyPrefix, a+completedTTL)
		// Their expiry index: with no janitor nothing reads it, and an
		// entry outlives its record by at most the hour it names.
		add("idempotency-expiry", layout.IdempotencyExpiryPrefix, a+completedTTL)
	}
	add("inbox-expired", layout.InboxExpiredPrefix, c.AgeOf(Inbox))
	add("artifacts", layout.ProjectsPrefix, c.AgeOf(Artifacts))
	add("stats-hours", layout.StatsHoursPrefix, c.AgeOf(StatsHours))
	add("stats-days", layout.StatsDaysPrefix, c.AgeOf(StatsDays))
	if cfg.Rules == nil {
		cfg.Rules = []S3Rule{}
	}
	return json.MarshalIndent(cfg, "", "  ")
}
