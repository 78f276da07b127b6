package jobqueue

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/runconveyor/conveyor/internal/audit"
	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// flushes tells whether a job at rest in s has its trail written to the
// audit log: COMPLETE, DEAD and CANCELLED (the end), RETRY_BACKOFF (the wait). A job
// at rest nowhere else: QUEUED is left by the next claim, FAILED by the
// bury that follows at once, the pipeline states by the claim's next write,
// and their moves go with that write's.
func flushes(s lifecycle.JobState) bool {
	return s == lifecycle.JobComplete || s == lifecycle.JobDead || s == lifecycle.JobRetryBackoff || s == lifecycle.JobCancelled
}

// auditor writes the audit objects of the jobs' trails and remembers, per
// job, which it knows written (audited) and which it failed to write
// (gaps): a claim does not settle a job with a gap (repair.go).
type auditor struct {
	store         *storage.Store
	log           *slog.Logger
	node          string
	artifactActor lifecycle.Actor

	mu      sync.Mutex
	audited map[string]int64 // job id → latest version whose audit this Queue wrote
	gaps    map[string]int64 // job id → version at rest whose audit flush failed
}

// ensureAudited makes sure the audit object of d's trail exists when d is
// at rest (Sweep's repair of a writer that died before its flush); the
// moves of a job not at rest are in its record, to be flushed later.
func (q *auditor) ensureAudited(ctx context.Context, d *jobDoc) {
	if err := q.ensureAuditedErr(ctx, d); err != nil {
		q.log.ErrorContext(ctx, "jobqueue: audit write failed", "job_id", d.JobID, "err", err)
	}
}

// ensureAuditedErr is ensureAudited, failing when the object is missing
// and could not be written.
func (q *auditor) ensureAuditedErr(ctx context.Context, d *jobDoc) error {
	if !flushes(d.Status) || len(d.Trail) == 0 {
		return nil
	}
	err := q.ensureFlushed(ctx, d)
	if err != nil {
		q.mu.Lock()
		q.auditGap(d.JobID, d.Version, true)
		q.mu.Unlock()
	}
	return err
}

// ensureFlushed makes sure the audit object of d (at rest, at its
// version) exists: known written by this Queue, found, or written now.
func (q *auditor) ensureFlushed(ctx context.Context, d *jobDoc) error {
	q.mu.Lock()
	done := q.audited[d.JobID] >= d.Version
	q.mu.Unlock()
	if done {
		return nil
	}
	key, b, err := q.auditObject(d)
	if err != nil || key == "" {
		return err
	}
	if err := audit.Ensure(ctx, q.store, key, b); err != nil {
		return err
	}
	q.flushed(d)
	return nil
}

// flush writes the audit object of d's trail, d having just come to rest.
// A failure is logged: the record keeps the trail, and the next writer or
// Sweep writes the object (ensureFlushed).
func (q *auditor) flush(ctx context.Context, d *jobDoc) {
	key, b, err := q.auditObject(d)
	if err == nil && key != "" {
		err = q.putAudit(ctx, key, b)
	}
	if err != nil {
		q.log.ErrorContext(ctx, "jobqueue: audit write failed", "job_id", d.JobID, "status", d.Status, "err", err)
		q.mu.Lock()
		q.auditGap(d.JobID, d.Version, true) // the claim does not settle the job (repair.go)
		q.mu.Unlock()
		return
	}
	q.flushed(d)
}

// flushed notes that d's audit object exists.
func (q *auditor) flushed(d *jobDoc) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.auditGap(d.JobID, d.Version, false)
	if q.audited == nil {
		q.audited = map[string]int64{}
	}
	if q.audited[d.JobID] < d.Version {
		q.audited[d.JobID] = d.Version
	}
	if jobMachineOf(&d.Job).IsTerminal(d.Status) {
		delete(q.audited, d.JobID)
	}
}

// auditObject is the audit object of d's trail (docs/spec.md#audit-event, one event per
// move, and the artifact's creation before the move out of
// ARTIFACT_WRITE): the last event with the others as its Prior
// (records.Expand), under an id made of the last move's time,
// the job and the record's version, so every writer that writes it writes
// the same object once. key is "" for an empty trail.
func (q *auditor) auditObject(d *jobDoc) (key string, b []byte, err error) {
	// Sized once: an event is a large struct, and growing the slice move
	// by move was a noticeable share of a job's allocated bytes.
	evs := make([]lifecycle.AuditEvent, 0, len(d.Trail)+1)
	for _, m := range d.Trail {
		// The artifact was written in ARTIFACT_WRITE, or in RUNNING on the
		// general machine: its event goes before the move out.
		if (m.From == lifecycle.JobArtifactWrite || m.From == lifecycle.JobRunning) && d.AuditArtifact != "" {
			evs = append(evs, lifecycle.AuditEvent{TS: m.At, Event: "artifact.create", Actor: string(q.artifactActor),
				JobID: d.JobID, RunID: d.RunID, ArtifactID: d.AuditArtifact, TenantID: d.TenantID, To: "finalized", Node: q.node})
		}
		ev := lifecycle.AuditEvent{
			TS: m.At, Event: "job.status.update", Actor: string(m.Actor), JobID: d.JobID, RunID: d.RunID,
			TenantID: d.TenantID, From: string(m.From), To: string(m.To), Node: q.node,
		}
		if m.From == "" {
			ev.Event = "job.create"
		}
		if m.ErrorCode != "" {
			ev.Context = moveErrorContext(m)
		}
		if m.To == lifecycle.JobComplete {
			ev.ArtifactID = d.ArtifactID
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		return "", nil, nil
	}
	last := evs[len(evs)-1]
	last.Prior = evs[:len(evs)-1]
	key, err = layout.AuditKey(last.TS, records.AuditEventID(last.TS, d.JobID, d.Version, 0))
	if err != nil {
		return "", nil, err
	}
	b, err = jsonenc.Marshal(&last)
	return key, b, err
}

// commitWrites is the audit object of d as a write to commit with the
// record's write that brings d to rest (at its new version), on a store
// that commits: the two land at one instant, so no flush follows and no
// gap is left. None when d does not come to rest.
func (q *auditor) commitWrites(d *jobDoc) ([]storage.Write, error) {
	if !flushes(d.Status) {
		return nil, nil
	}
	key, b, err := q.auditObject(d)
	if err != nil || key == "" {
		return nil, err
	}
	return []storage.Write{{Key: key, Value: b, Cond: storage.IfNotExists()}}, nil
}

func (q *auditor) putAudit(ctx context.Context, key string, b []byte) error {
	return audit.Put(ctx, q.store, key, b)
}

// auditGap records that the audit object of version v of a job at rest
// (its flush) could not be written (gap), or that it exists. A claim does
// not settle a job with a gap: its lock goes on naming the job, so the
// next claim of the agent or the sweep writes the object (ensureFlushed).
// Called with q.mu held.
func (q *auditor) auditGap(jobID string, v int64, gap bool) {
	switch {
	case gap && q.gaps == nil:
		q.gaps = map[string]int64{jobID: v}
	case gap:
		q.gaps[jobID] = max(q.gaps[jobID], v)
	case q.gaps[jobID] <= v:
		delete(q.gaps, jobID)
	}
}

// hasAuditGap tells whether the audit object of the job's last rest is
// known missing: its flush failed and no one has written it since.
func (q *auditor) hasAuditGap(jobID string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, gap := q.gaps[jobID]
	return gap
}

// The metadata keys of a failed attempt's error in its move's audit
// event (docs/spec.md#audit-event: the transition context carries what
// the platform's fields do not).
const (
	metaErrorCode = "error_code"
	metaError     = "error"
)

// moveErrorContext is the transition context of a move made for a failed
// attempt: its error code and message as metadata.
func moveErrorContext(m lifecycle.JobMove) json.RawMessage {
	b, err := jsonenc.Marshal(&lifecycle.TransitionContext{Metadata: map[string]string{metaErrorCode: m.ErrorCode, metaError: m.Error}})
	if err != nil {
		return nil // plain strings: it cannot fail
	}
	return b
}
