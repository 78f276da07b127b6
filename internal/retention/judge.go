package retention

import (
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/lifecycle"
)

// What is eligible, judged on a record as read. Each function takes the
// kind's age (≥ 0; Forever keeps everything) and the janitor's now, and
// answers whether the record is finished and was finished at least age
// ago. A record without the time it is aged from is kept: what cannot be
// judged is never deleted.

// due tells whether at is set and at least age before now.
func due(at, now time.Time, age time.Duration) bool {
	return age >= 0 && !at.IsZero() && !now.Before(at.Add(age))
}

// RunEligible tells whether a run's status is terminal in its machine and
// finished at least age before now.
func RunEligible(st *lifecycle.RunStatus, now time.Time, age time.Duration) bool {
	return st.FinishedAt != nil && lifecycle.RunFinished(st.Machine, st.Status) && due(*st.FinishedAt, now, age)
}

// AuditDayEligible tells whether the audit day folder of day (UTC) ended
// at least age before now.
func AuditDayEligible(day, now time.Time, age time.Duration) bool {
	return due(day.UTC().Truncate(24*time.Hour).Add(24*time.Hour), now, age)
}

// JobEligible tells whether a job is finished (COMPLETE or CANCELLED, or
// DEAD when dead is set) and was last written at least age before now.
func JobEligible(j *lifecycle.Job, dead bool, now time.Time, age time.Duration) bool {
	finished := j.Status == lifecycle.JobComplete || j.Status == lifecycle.JobCancelled
	if dead {
		finished = j.Status == lifecycle.JobDead
	}
	return finished && due(j.UpdatedAt, now, age)
}

// NLMJobEligible tells whether an NLM job is finished (DONE or ERROR, both
// terminal) and was last written at least age before now.
func NLMJobEligible(j *lifecycle.NLMJob, now time.Time, age time.Duration) bool {
	return (j.Status == lifecycle.NLMDone || j.Status == lifecycle.NLMError) && due(j.UpdatedAt, now, age)
}

// IdempotencyEligible tells whether an idempotency record's expires_at
// (for a processing one, the later of it and its lease's expiry) is at
// least age before now.
func IdempotencyEligible(rec *idemrecord.Record, now time.Time, age time.Duration) bool {
	at := rec.ExpiresAt
	if rec.Status == idemrecord.Processing {
		lease, ok := rec.LeaseEnd()
		if !ok {
			return false
		}
		at = later(at, lease)
	}
	return due(at, now, age)
}

// IdempotencyMarkerEligible tells whether a run marker of an idempotency
// key (written on a store that settles) expired at least age before now.
func IdempotencyMarkerEligible(m *idemrecord.Marker, now time.Time, age time.Duration) bool {
	return due(m.ExpiresAt, now, age)
}

// InboxEligible tells whether an expired inbox entry's TTL ended at least
// age before now.
func InboxEligible(e *lifecycle.InboxEntry, now time.Time, age time.Duration) bool {
	return e.Status == lifecycle.InboxExpired && !e.CreatedAt.IsZero() && due(e.Expires(), now, age)
}

// ArtifactEligible tells whether an artifact was created more than age
// before now, the artifact store's own cleanup rule (its CleanupAge).
func ArtifactEligible(a *artifact.Artifact, now time.Time, age time.Duration) bool {
	return age >= 0 && !a.CreatedAt.IsZero() && now.Sub(a.CreatedAt) > age
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
