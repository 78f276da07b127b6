package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Work in flight, found without reading finished history (issue 12,
// docs/spec.md#key-layout).
//
// No index object of its own is written: every job in flight is already
// reachable from an object that exists only while the job is in flight.
//
//   - A job waiting to run (QUEUED, RETRY_BACKOFF) has its entry in its
//     agent's ready lane (queue/lanes/{agent}/...). Enqueue and Requeue
//     write the lane entry before the job record, and every other writer
//     that puts a job in a lane does so under its agent's lock, so no
//     waiting job is ever without an entry or a lock naming it.
//   - A job being run (CONTEXT_ASSEMBLY, NOTEBOOKLM_CALL, ARTIFACT_WRITE),
//     or left by a claim between two writes (FAILED not yet buried,
//     RETRY_BACKOFF not yet laned), is named by its agent's lock
//     (queue/agents/{agent}.json, job_id). The lock goes on naming the job
//     until the claim has settled it: a claim that lost its lease, or its
//     store, releases the lock still naming its job (Claim.named), and the
//     next claim of the agent repairs that job before it names another
//     (repairOrphan).
//   - The pickup is a write of the job, not of the lock: a claim paused
//     past its lease may pick up a job after another process took the
//     lock and named another job. So a claim deletes the lane entry only
//     after the pickup is confirmed (confirmPickup: the lock still named
//     the job, or the job was put back in its lane), and an entry whose
//     job does not point back is deleted only after its job is repaired
//     (repairStale: a job in a pipeline state under an older epoch is
//     rescued; one whose own entry is missing is relaned); the sweep
//     leaves the entry of a job in a pipeline state until its lease has
//     run out and it is rescued.
//   - A claim that settled its job keeps the lock rather than releasing it
//     (Claim.end, issue 12: one lock write per job), still naming the job.
//     Whoever takes a lock that names a job it does not know settled (a
//     lock kept by another process, or a free one) settles that job first
//     (settle: its audit object, lane entry or burial), or rescues it if
//     it is still in a pipeline state, before the lock names another job.
//
// So the sweep lists queue/ (the locks and the lanes: O(agents + jobs in
// flight)) and reads only the jobs those name; the claim already read only
// lanes and locks. A job that reached COMPLETE or DEAD is in no lane and
// named by no lock but its agent's kept one, until the agent's next claim:
// at most one finished job per agent is read again.
//
// An entry written before its job (Enqueue, Requeue) points for a moment
// at a job that does not exist yet, or does not point back: a claim or a
// sweep that finds such an entry younger than LeaseTTL leaves it alone
// (lanePending); an older one is garbage of a writer that died, deleted.
//
// These rules are written for a store that writes one key at a time
// (filestore, S3), and hold as written there. On a store that commits
// several keys at once (storage.Store.CanCommit: memstore, SQLite) the
// claim's writes are fewer, and several states "between two writes"
// cannot arise: Enqueue's entry and job land in one commit; a pickup, its
// agent lock's write (the take, or the lock renamed to the job) and its
// lane entry's delete land in one commit conditioned on the lock's
// version (pickupJoint), so a pickup lands only while the claim holds the
// lock naming the job, and no picked-up job is left in no lane and named
// by no lock (nothing to confirm after it: confirmPickup is not called);
// and a job's end writes its artifact (the queue's own artifact store's),
// its record and the audit object of its rest in one commit (endWith). The states that remain are repaired
// by the same rules: a claim writes its lock alone, naming the job, before
// it repairs a stale entry's job (holdLock); a job its pickup sent to
// FAILED is buried, and a failed attempt laned, by a write after it.

// repairer repairs a job a writer left between two writes (this file's
// rules): for the claims, which settle what an agent's lock names or a
// stale lane entry points at, and for the sweep.
type repairer struct {
	store    *storage.Store
	clock    clock.Clock
	leaseTTL time.Duration
	jobs     *jobStore
	lanes    *lanes
	sched    *scheduler
	audit    *auditor
	retries  *retries
}

// pendingRecheck is how soon a claim that met a pending lane entry looks
// at the agent again; the writer's own Queue schedules the agent at once
// when the job is written.
const pendingRecheck = 50 * time.Millisecond

// lanePending reports whether lane entry key, whose job d (nil: not
// found) does not point back at it, may still be waiting for the job's
// write: it is less than LeaseTTL old (a writer slower than a lease is
// presumed dead), and either its job does not exist yet (Enqueue writes
// it next) or is FAILED or DEAD as of no later than the entry (Requeue
// updates it next). Any other entry is stale: its job moved on.
func (q *repairer) lanePending(key string, d *jobDoc, now time.Time) bool {
	at, _, ok := parseLaneKey(key)
	if !ok || now.Sub(at) >= q.leaseTTL {
		return false
	}
	return d == nil || (d.Status == lifecycle.JobFailed || d.Status == lifecycle.JobDead) && !at.Before(d.UpdatedAt)
}

// pendingAfter is lanePending for the error a pickup of key gave: a job
// not found (but not quarantined), or a staleEntry.
func (q *repairer) pendingAfter(key string, err error, now time.Time) bool {
	var se *staleEntry
	switch {
	case errors.As(err, &se):
		return q.lanePending(key, &se.doc, now)
	case errors.Is(err, storage.ErrNotFound) && !errors.Is(err, lifecycle.ErrCorrupt):
		// Not yet believed gone (a store that settles): pending too.
		_, jobID, _ := parseLaneKey(key)
		return q.lanePending(key, nil, now) || !q.jobs.gone(jobID, err)
	}
	return false
}

// staleEntry is errStale with the job as the pickup saw it.
type staleEntry struct{ doc jobDoc }

// repairStale repairs the job of lane entry key, which does not point back
// at it (se: as a claim's pickup read it), before the claim deletes the
// entry; the claim's lock names the job meanwhile, with epoch. The entry
// may be all that still points at a job in flight: a pickup that landed
// after its claim lost the lock, whose claim died before it could put the
// job back (confirmPickup), left the job in a pipeline state under an
// older epoch, rescued here whatever its lease says; any other job is
// repaired as the sweep repairs it (repairJob: a waiting job whose own
// entry is missing, say a rescue that died between its two writes, is
// relaned; a FAILED one is buried).
func (q *repairer) repairStale(ctx context.Context, key string, se *staleEntry, epoch int64) error {
	if pipelineState(se.doc.Status) {
		return q.retries.rescue(ctx, se.doc.JobID, epoch)
	}
	var r SweepReport
	return q.repairJob(ctx, &se.doc, key, &r)
}

func (e *staleEntry) Error() string        { return errStale.Error() }
func (e *staleEntry) Is(target error) bool { return target == errStale }

// repairOrphan settles the job an agent's lock still names when a claim
// takes the lock: a job left in a pipeline state is rescued under the
// claim's epoch, and one a claim left between two writes is laned or
// buried, before the lock names another job.
func (q *repairer) repairOrphan(ctx context.Context, jobID string, epoch int64, slot int) error {
	d, _, err := q.jobs.read(ctx, jobID)
	if err != nil {
		return err
	}
	if elsewhere(&d, slot) {
		return nil // run under another lock of its lane, which names it
	}
	if pipelineState(d.Status) {
		return q.retries.rescue(ctx, jobID, epoch)
	}
	return q.settle(ctx, &d)
}

// settle finishes what the claim of d, a job out of its pipeline states,
// may have left undone after the write that ended its run: its audit
// object (a job at rest), its lane entry (a retry), its burial (FAILED).
// Unlike the sweep it fails when the audit object cannot be written: a
// lock goes on naming d until settle succeeds.
func (q *repairer) settle(ctx context.Context, d *jobDoc) error {
	if err := q.audit.ensureAuditedErr(ctx, d); err != nil {
		return err
	}
	var r SweepReport
	return q.repairJob(ctx, d, "", &r)
}

// repairJob is sweepJob but for the audit object.
func (q *repairer) repairJob(ctx context.Context, d *jobDoc, laned string, r *SweepReport) error {
	now := q.clock.Now()
	switch {
	case pipelineState(d.Status) && (d.Lease == nil || !now.Before(d.Lease.ExpiresAt)):
		if err := q.retries.rescue(ctx, d.JobID, 0); err != nil {
			return err
		}
		r.Rescued++
	case (d.Status == lifecycle.JobQueued || d.Status == lifecycle.JobRetryBackoff) && d.ReadyKey != "" && d.ReadyKey != laned:
		_, _, err := q.store.Get(ctx, d.ReadyKey)
		if errors.Is(err, storage.ErrNotFound) {
			at, _, ok := parseLaneKey(d.ReadyKey)
			if !ok {
				return fmt.Errorf("jobqueue: job %s has a malformed ready key %q", d.JobID, d.ReadyKey)
			}
			if err := q.lanes.putLane(ctx, d.ReadyKey, d.JobID, at); err != nil {
				return err
			}
			q.sched.agent(d.AgentSlug).forget()
			r.Relaned++
		} else if err != nil {
			return err
		}
	case d.Status == lifecycle.JobFailed:
		if _, err := q.retries.bury(ctx, d.JobID, nil, ""); err != nil {
			return err
		}
		r.Buried++
	}
	return nil
}
