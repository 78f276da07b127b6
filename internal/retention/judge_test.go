package retention_test

import (
	"testing"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/lifecycle"
)

var (
	t0  = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	day = 24 * time.Hour
	age = 7 * day
)

func at(d time.Duration) *time.Time { t := t0.Add(d); return &t }

func TestRunEligible(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		st   lifecycle.RunStatus
		want bool
	}{
		{"completed past age", lifecycle.RunStatus{Status: "completed", FinishedAt: at(-age)}, true},
		{"failed past age", lifecycle.RunStatus{Status: "failed", FinishedAt: at(-age - time.Hour)}, true},
		{"completed within age", lifecycle.RunStatus{Status: "completed", FinishedAt: at(-age + time.Second)}, false},
		{"running, old", lifecycle.RunStatus{Status: "running", StartedAt: t0.Add(-30 * day)}, false},
		{"running with a stray finished_at", lifecycle.RunStatus{Status: "running", FinishedAt: at(-30 * day)}, false},
		{"terminal without finished_at", lifecycle.RunStatus{Status: "completed"}, false},
		{"cancelable canceled", lifecycle.RunStatus{Machine: lifecycle.MachineCancelable, Status: "canceled", FinishedAt: at(-age)}, true},
		{"cancelable cancel_requested", lifecycle.RunStatus{Machine: lifecycle.MachineCancelable, Status: "cancel_requested", FinishedAt: at(-age)}, false},
		{"approval awaiting", lifecycle.RunStatus{Machine: lifecycle.MachineApproval, Status: "awaiting_approval", FinishedAt: at(-age)}, false},
		{"approval cancelled", lifecycle.RunStatus{Machine: lifecycle.MachineApproval, Status: "cancelled", FinishedAt: at(-age)}, true},
		{"unknown machine", lifecycle.RunStatus{Machine: "mine", Status: "completed", FinishedAt: at(-age)}, false},
		{"canonical state of another machine", lifecycle.RunStatus{Status: "succeeded", FinishedAt: at(-age)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := retention.RunEligible(&c.st, t0, age); got != c.want {
				t.Errorf("RunEligible = %v, want %v", got, c.want)
			}
			if retention.RunEligible(&c.st, t0, retention.Forever) {
				t.Error("eligible though kept for ever")
			}
		})
	}
}

func TestJobEligible(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		status  lifecycle.JobState
		updated time.Duration
		dead    bool
		want    bool
	}{
		{"complete past age", lifecycle.JobComplete, -age, false, true},
		{"complete within age", lifecycle.JobComplete, -age + time.Minute, false, false},
		{"dead, as a finished job", lifecycle.JobDead, -30 * day, false, false},
		{"dead, as a dead job", lifecycle.JobDead, -age, true, true},
		{"complete, as a dead job", lifecycle.JobComplete, -age, true, false},
		{"cancelled past age", lifecycle.JobCancelled, -age, false, true},
		{"cancelled within age", lifecycle.JobCancelled, -age + time.Minute, false, false},
		{"cancelled, as a dead job", lifecycle.JobCancelled, -age, true, false},
		{"running, old", lifecycle.JobRunning, -30 * day, false, false},
		{"failed (about to be buried)", lifecycle.JobFailed, -30 * day, true, false},
		{"queued, old", lifecycle.JobQueued, -30 * day, false, false},
		{"retry backoff, old", lifecycle.JobRetryBackoff, -30 * day, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			j := lifecycle.Job{Status: c.status, UpdatedAt: t0.Add(c.updated)}
			if got := retention.JobEligible(&j, c.dead, t0, age); got != c.want {
				t.Errorf("JobEligible = %v, want %v", got, c.want)
			}
		})
	}
	var zero lifecycle.Job
	zero.Status = lifecycle.JobComplete
	if retention.JobEligible(&zero, false, t0, age) {
		t.Error("a job without updated_at is eligible")
	}
}

func TestNLMJobEligible(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status lifecycle.NLMState
		want   bool
	}{{lifecycle.NLMDone, true}, {lifecycle.NLMError, true}, {lifecycle.NLMQuery, false}, {lifecycle.NLMAccepted, false}} {
		j := lifecycle.NLMJob{Status: c.status, UpdatedAt: t0.Add(-age)}
		if got := retention.NLMJobEligible(&j, t0, age); got != c.want {
			t.Errorf("%s: NLMJobEligible = %v, want %v", c.status, got, c.want)
		}
	}
}

func TestIdempotencyEligible(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		rec  idemrecord.Record
		age  time.Duration
		want bool
	}{
		{"completed, expired", idemrecord.Record{Status: idemrecord.Completed, ExpiresAt: t0.Add(-time.Second)}, 0, true},
		{"completed, expires now", idemrecord.Record{Status: idemrecord.Completed, ExpiresAt: t0}, 0, true},
		{"completed, not yet expired", idemrecord.Record{Status: idemrecord.Completed, ExpiresAt: t0.Add(time.Second)}, 0, false},
		{"failed, expired, grace not over", idemrecord.Record{Status: idemrecord.Failed, ExpiresAt: t0.Add(-time.Hour)}, 2 * time.Hour, false},
		{"failed, expired past grace", idemrecord.Record{Status: idemrecord.Failed, ExpiresAt: t0.Add(-3 * time.Hour)}, 2 * time.Hour, true},
		{"processing, lock lapsed", idemrecord.Record{Status: idemrecord.Processing, ExpiresAt: t0.Add(-time.Hour), LockExpiresAt: at(-time.Hour)}, 0, true},
		{"processing, lock live", idemrecord.Record{Status: idemrecord.Processing, ExpiresAt: t0.Add(-time.Hour), LockExpiresAt: at(time.Minute)}, 0, false},
		{"processing without lock", idemrecord.Record{Status: idemrecord.Processing, ExpiresAt: t0.Add(-time.Hour)}, 0, false},
		{"no expires_at", idemrecord.Record{Status: idemrecord.Completed}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := retention.IdempotencyEligible(&c.rec, t0, c.age); got != c.want {
				t.Errorf("IdempotencyEligible = %v, want %v", got, c.want)
			}
		})
	}
}

func TestIdempotencyMarkerEligible(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		expires time.Time
		age     time.Duration
		want    bool
	}{
		{"expired", t0.Add(-time.Second), 0, true},
		{"live", t0.Add(time.Second), 0, false},
		{"expired, grace not over", t0.Add(-time.Hour), 2 * time.Hour, false},
		{"no expires_at", time.Time{}, 0, false},
	} {
		m := idemrecord.Marker{ExpiresAt: c.expires}
		if got := retention.IdempotencyMarkerEligible(&m, t0, c.age); got != c.want {
			t.Errorf("%s: IdempotencyMarkerEligible = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestInboxEligible(t *testing.T) {
	t.Parallel()
	entry := func(s lifecycle.InboxState, created time.Duration) *lifecycle.InboxEntry {
		e := &lifecycle.InboxEntry{Status: s, CreatedAt: t0.Add(created)}
		e.Metadata.TTLHours = 72
		return e
	}
	cases := []struct {
		name string
		e    *lifecycle.InboxEntry
		want bool
	}{
		{"expired past age", entry(lifecycle.InboxExpired, -age-72*time.Hour), true},
		{"expired within age", entry(lifecycle.InboxExpired, -age-71*time.Hour), false},
		{"pending, old", entry(lifecycle.InboxPending, -30*day), false},
		{"processed, old (not this kind)", entry(lifecycle.InboxProcessed, -30*day), false},
		{"expired without created_at", &lifecycle.InboxEntry{Status: lifecycle.InboxExpired}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := retention.InboxEligible(c.e, t0, age); got != c.want {
				t.Errorf("InboxEligible = %v, want %v", got, c.want)
			}
		})
	}
}

func TestAuditDayEligible(t *testing.T) {
	t.Parallel()
	cases := []struct {
		day  time.Time
		want bool
	}{
		{time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), true},   // ended Jan 3 00:00, + 7 d = Jan 10 00:00 ≤ t0
		{time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC), false},  // ends Jan 4, + 7 d = Jan 11 > t0
		{time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC), false}, // today
	}
	for _, c := range cases {
		if got := retention.AuditDayEligible(c.day, t0, age); got != c.want {
			t.Errorf("AuditDayEligible(%s) = %v, want %v", c.day.Format("20060102"), got, c.want)
		}
	}
}

func TestArtifactEligible(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		a    artifact.Artifact
		want bool
	}{
		{"created past age", artifact.Artifact{CreatedAt: t0.Add(-age - time.Second), Finalized: true}, true},
		{"created exactly age ago", artifact.Artifact{CreatedAt: t0.Add(-age), Finalized: true}, false},
		{"created within age", artifact.Artifact{CreatedAt: t0.Add(-time.Hour), Finalized: true}, false},
		{"not finalized, old (the cleanup takes it too)", artifact.Artifact{CreatedAt: t0.Add(-30 * day)}, true},
		{"no created_at", artifact.Artifact{Finalized: true}, false},
	}
	for _, c := range cases {
		if got := retention.ArtifactEligible(&c.a, t0, age); got != c.want {
			t.Errorf("%s: ArtifactEligible = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestAgeOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  retention.Config
		want map[retention.Kind]time.Duration
	}{
		{"off by default", retention.Config{}, map[retention.Kind]time.Duration{
			retention.Runs: retention.Forever, retention.Audit: retention.Forever, retention.Jobs: retention.Forever,
			retention.DeadJobs: retention.Forever, retention.Idempotency: retention.Forever, retention.Inbox: retention.Forever,
			retention.Artifacts: retention.Forever,
		}},
		{"one age", retention.Config{Age: age}, map[retention.Kind]time.Duration{
			retention.Runs: age, retention.Audit: age, retention.Jobs: age, retention.DeadJobs: retention.Forever,
			retention.Idempotency: 0, retention.Inbox: age, retention.Artifacts: retention.Forever,
		}},
		{"overrides", retention.Config{Age: age, Ages: map[retention.Kind]time.Duration{
			retention.Audit: 30 * day, retention.DeadJobs: 90 * day, retention.Runs: retention.Forever, retention.Idempotency: time.Hour,
		}}, map[retention.Kind]time.Duration{
			retention.Runs: retention.Forever, retention.Audit: 30 * day, retention.Jobs: age, retention.DeadJobs: 90 * day,
			retention.Idempotency: time.Hour, retention.Inbox: age, retention.Artifacts: retention.Forever,
		}},
		{"an override alone", retention.Config{Ages: map[retention.Kind]time.Duration{retention.Audit: day}}, map[retention.Kind]time.Duration{
			retention.Runs: retention.Forever, retention.Audit: day, retention.Jobs: retention.Forever,
			retention.DeadJobs: retention.Forever, retention.Idempotency: retention.Forever, retention.Inbox: retention.Forever,
			retention.Artifacts: retention.Forever,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for k, want := range c.want {
				if got := c.cfg.AgeOf(k); got != want {
					t.Errorf("AgeOf(%s) = %s, want %s", k, got, want)
				}
			}
			if on := c.cfg.Enabled(); on != (c.name != "off by default") {
				t.Errorf("Enabled = %v", on)
			}
		})
	}
}
