package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// jobDoc is the stored form of a Job: the record plus the document version.
type jobDoc struct {
	lifecycle.Meta

	lifecycle.Job
	// AuditArtifact is the artifact whose creation event is still to be
	// flushed with the trail (the artifact store was told not to write it,
	// artifact.Draft.Audited); emitted before the move out of
	// ARTIFACT_WRITE.
	AuditArtifact string `json:"audit_artifact,omitempty"`
	// RanEpoch is the agent-lock epoch of the last claim that ended the
	// job's run (its commit or its failure): a lock of that epoch naming
	// the job is free, though not released (see Claim.end).
	RanEpoch int64 `json:"ran_epoch,omitempty"`
}

// jobStore is the fenced-write core of the job records: every read and
// every write of a job goes through it, with the record validated, poison
// quarantined, the audit object of a job at rest written and the write
// observed.
type jobStore struct {
	store *storage.Store
	clock clock.Clock
	quar  *quarantine
	// absent holds the jobs read missing on a store that settles, until
	// their absence is confirmed (settle.go); settles at once elsewhere.
	absent *evidence.Absence
	audit  *auditor
	obs    *observer
	grace  stopGrace
	// outbox writes the callback entry of a job that ends (callback.go).
	outbox *outbox
}

// read reads a job; a poison record is quarantined and reads as missing
// (ErrNotFound), with the quarantine logged and counted.
func (q *jobStore) read(ctx context.Context, jobID string) (jobDoc, storage.Version, error) {
	key, err := layout.JobKey(jobID)
	if err != nil {
		return jobDoc{}, "", err
	}
	rec := q.record(key)
	d, v, err := rec.Load(ctx)
	if err = q.quar.poison(ctx, err); err != nil {
		return jobDoc{}, "", err
	}
	if q.absent.Settle > 0 {
		q.absent.Found(jobID)
	}
	return d, v, nil
}

// jobRecord is the job at key as the core writes it: validated on every
// read, so a record that is not a job of this key is poison.
func (q *jobStore) record(key string) *fence.Record[jobDoc, *jobDoc] {
	return &fence.Record[jobDoc, *jobDoc]{Store: q.store, Key: key, Validate: func(d *jobDoc) error { return validJob(key, d) },
		Trim: trimAudited}
}

// trimAudited is a job record at rest as stored in the commit of its audit
// object (Record.Trim): the trail holds the moves not yet in the audit
// log, so it is stored empty, and so is audit_artifact. A DEAD record
// keeps them: dead jobs outlive the audit days retention deletes, and its
// last attempt stays readable there. Where the audit object is written
// after the record (no commit of several keys), the record keeps them
// until its next write, which makes sure the object exists first.
func trimAudited(d *jobDoc) {
	if flushes(d.Status) && d.Status != lifecycle.JobDead {
		d.Trail, d.AuditArtifact = nil, ""
	}
}

// validJob refuses a decoded job that cannot be this key's job.
func validJob(key string, d *jobDoc) error {
	id, _ := layout.JobIDFromKey(key)
	switch {
	case d.JobID != id:
		return fmt.Errorf("job_id %q in the record of %q", d.JobID, id)
	case machine.JobMachineNamed(d.Machine) == nil:
		return &newerRecordError{key: key, machine: d.Machine}
	case !machine.AnyJobState(d.Status):
		return fmt.Errorf("unknown status %q", d.Status)
	case storekey.ValidateID("agent slug", d.AgentSlug) != nil:
		return fmt.Errorf("invalid agent_slug %q", d.AgentSlug)
	case d.ReadyKey != "" && !strings.HasPrefix(d.ReadyKey, lanePrefix+d.AgentSlug+"/"):
		return fmt.Errorf("ready_key %q outside the agent's lane", d.ReadyKey)
	}
	return nil
}

// jobMachineOf is the machine j moves on: the one its record names
// (Job.Machine, set at enqueue), while j is in one of that machine's
// states; else the spec's. A general job an earlier release picked up
// (into CONTEXT_ASSEMBLY: it knows one machine) so finishes its attempt on
// the spec's, and is back on its own once it is in a state the two share.
func jobMachineOf(j *lifecycle.Job) *machine.Machine[lifecycle.JobState, *lifecycle.Job] {
	if j.Machine == lifecycle.JobMachineGeneral && machine.GeneralJobMachine().IsState(j.Status) {
		return machine.GeneralJobMachine()
	}
	return machine.JobMachine()
}

// general tells whether j runs on the general machine now (jobMachineOf).
func general(j *lifecycle.Job) bool {
	return jobMachineOf(j) == machine.GeneralJobMachine()
}

// errNewerRecord matches the error of a job record that names a job
// machine this release does not know: a later release's. It is left as it
// is, neither quarantined nor written (nor its lane entry or lock
// repaired): the release that wrote it drives it. An earlier release had
// no such rule, and quarantined a record whose status it did not know.
var errNewerRecord = errors.New("jobqueue: a job record of a later release")

// newerRecordError is errNewerRecord for one record.
type newerRecordError struct{ key, machine string }

func (e *newerRecordError) Error() string {
	return fmt.Sprintf("%s runs on job machine %q, which this release does not know: left to the release that wrote it", e.key, e.machine)
}
func (e *newerRecordError) Is(target error) bool { return target == errNewerRecord }

// fire moves d by event as actor on its machine (jobMachineOf) and
// appends the move to d's trail.
func fire(ctx context.Context, d *jobDoc, event lifecycle.Event, actor lifecycle.Actor) error {
	ch, err := jobMachineOf(&d.Job).Fire(ctx, &d.Job, event, actor)
	if err != nil {
		return err
	}
	d.Trail = append(d.Trail, lifecycle.JobMove{From: ch.From, To: ch.To, Event: event, Actor: actor})
	return nil
}

// update is every job write: mutate on the record, updated_at never
// going back, a compare-and-swap write, then, when the write brings the
// job to rest, the audit object of its trail. When the caller holds the
// document as it last wrote it (cached, at version ver) the write goes
// straight to If-Match; on a conflict, or without a cache, fence.Record
// reads first.
//
// The trail (Job.Trail) holds the moves not yet in the audit log: the
// moves since the job last came to rest. A write that leaves a rest state
// first makes sure the rest's audit object exists (a writer that died
// between its write and its flush leaves no gap), then starts the trail
// afresh; any other write carries the trail on and adds its moves.
func (q *jobStore) update(ctx context.Context, jobID string, cached *jobDoc, ver storage.Version, mutate func(d *jobDoc, now time.Time) error) (jobDoc, storage.Version, error) {
	return q.updateFenced(ctx, jobID, cached, ver, "", 0, mutate)
}

// updateFenced is update for an owner: the write is refused with
// lifecycle.ErrLeaseLost unless the job still carries the lease (owner, epoch).
func (q *jobStore) updateFenced(ctx context.Context, jobID string, cached *jobDoc, ver storage.Version, owner string, epoch int64, mutate func(d *jobDoc, now time.Time) error) (jobDoc, storage.Version, error) {
	d, v, _, err := q.updateJoint(ctx, jobID, cached, ver, owner, epoch, mutate, nil)
	return d, v, err
}

// updateJoint is updateFenced whose write carries the writes joint gives
// for the written job (with its audit object's, when it comes to rest) in
// one commit, all or none (fence.Record.ApplyJoint): a refusal of one of
// joint's conditions is returned, nothing written. It returns joint's
// writes' versions. joint nil is updateFenced; only on a store that
// commits (storage.Store.CanCommit) may it be set.
func (q *jobStore) updateJoint(ctx context.Context, jobID string, cached *jobDoc, ver storage.Version, owner string, epoch int64, mutate func(d *jobDoc, now time.Time) error, joint func(d *jobDoc) ([]storage.Write, error)) (jobDoc, storage.Version, []storage.Version, error) {
	key, err := layout.JobKey(jobID)
	if err != nil {
		return jobDoc{}, "", nil, err
	}
	rec := q.record(key)
	rec.Owner, rec.Epoch, rec.Lease = owner, epoch, func(d *jobDoc) *lifecycle.Lease { return d.Lease }
	if epoch > 0 {
		rec.Now = q.clock.Now
	}
	if cached != nil && ver != "" {
		// Mutations replace pointer fields rather than write through them,
		// so the record's shallow copies leave the cache intact.
		rec.Seed(*cached, ver)
	}
	carried := 0
	var from lifecycle.JobState // the job's state before the change
	change := func(d *jobDoc) error {
		now := q.clock.Now().UTC()
		if now.Before(d.UpdatedAt) {
			now = d.UpdatedAt
		}
		if flushes(d.Status) && (len(d.Trail) > 0 || d.AuditArtifact != "") {
			if err := q.audit.ensureFlushed(ctx, d); err != nil {
				return err
			}
			d.Trail, d.AuditArtifact = nil, ""
		}
		// Appends must not write into the cached document's array: a new
		// one, with room for the write's moves (a pickup makes two).
		d.Trail = slices.Clip(d.Trail)
		if len(d.Trail) > 0 {
			d.Trail = slices.Grow(d.Trail, 2)
		}
		carried = len(d.Trail)
		from = d.Status
		if err := mutate(d, now); err != nil {
			return err
		}
		for i := carried; i < len(d.Trail); i++ {
			d.Trail[i].At = now
		}
		if len(d.Trail) > carried {
			d.UpdatedAt = now
		}
		return q.callbackBefore(ctx, from, d, now)
	}
	var (
		prior, d jobDoc
		audited  bool
		jointVs  []storage.Version
	)
	must, n := q.withCallback(joint, &from)
	if must != nil {
		prior, d, audited, jointVs, err = rec.ApplyJoint(ctx, change, must, q.audit.commitWrites)
		jointVs = jointVs[:min(len(jointVs), *n)]
	} else {
		prior, d, audited, err = rec.ApplyWith(ctx, change, q.audit.commitWrites)
	}
	if err = q.quar.poison(ctx, err); err != nil {
		return jobDoc{}, "", nil, err
	}
	_, nv := rec.Snapshot()
	q.obs.observe(&prior, &d, d.Trail[carried:])
	if q.outbox != nil && d.Callback != "" && callbackFinal(d.Status) && !callbackFinal(prior.Status) {
		q.outbox.written(d.JobID)
	}
	switch {
	case audited:
		q.audit.flushed(&d) // committed with the record
	case flushes(d.Status):
		// The write is done: its audit object is written even if ctx ends
		// meanwhile (a Worker stopping), within StopGrace, so a stop does
		// not leave the job for a repair (repair.go).
		fctx, cancel := q.grace.after(ctx)
		q.audit.flush(fctx, &d)
		cancel()
	}
	return d, nv, jointVs, nil
}
