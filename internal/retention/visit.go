package retention

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// prefixes are the listings of each kind, in key order.
var prefixes = map[Kind][]string{
	Runs:        {layout.AgentsPrefix},
	Audit:       {layout.AuditPrefix},
	Jobs:        {layout.JobsPrefix, layout.NLMJobsPrefix},
	DeadJobs:    {layout.JobsPrefix},
	Idempotency: {layout.IdempotencyPrefix},
	Inbox:       {layout.InboxExpiredPrefix},
	Artifacts:   {layout.ProjectsPrefix},
	StatsHours:  {layout.StatsHoursPrefix},
	StatsDays:   {layout.StatsDaysPrefix},
	// The index sorts before the records, so one listing in key order
	// goes through both.
	Proposals: {layout.ProposalsPendingIndex, layout.ProposalsPrefix},
}

// errKindDone ends a kind's listing early: nothing after the key can be
// eligible.
var errKindDone = errors.New("retention: nothing further of this kind is eligible")

// visit judges one listed key of kind k and deletes what is eligible. An
// error is the store's; a record that vanished, changed or does not decode
// is counted and left.
func (j *Janitor) visit(ctx context.Context, k Kind, key string, age time.Duration, r *Report) error {
	now := j.cfg.Clock.Now().UTC()
	switch k {
	case Runs:
		return j.visitRun(ctx, key, now, age, r)
	case Audit:
		return j.visitAuditDay(ctx, key, now, age, r)
	case Jobs, DeadJobs:
		return j.visitJob(ctx, k, key, now, age, r)
	case Idempotency:
		return j.visitIdempotency(ctx, key, now, age, r)
	case Inbox:
		if _, ok := layout.ParseInboxExpiredKey(key); !ok {
			return nil
		}
		var e lifecycle.InboxEntry
		ver, ok, err := j.read(ctx, key, &e, r)
		if !ok || err != nil || !InboxEligible(&e, now, age) {
			return err
		}
		return j.deleteFenced(ctx, k, key, ver, r)
	case Artifacts:
		cid, id, ok := layout.ParseArtifactKey(key)
		if !ok {
			return nil
		}
		var a artifact.Artifact
		_, ok, err := j.read(ctx, key, &a, r)
		if !ok || err != nil || !ArtifactEligible(&a, now, age) {
			return err
		}
		return j.deleteArtifact(ctx, cid, id, r)
	case StatsHours, StatsDays:
		return j.visitRollup(ctx, k, key, now, age, r)
	case Proposals:
		return j.visitProposal(ctx, key, now, age, r)
	}
	return nil
}

// visitRun judges a run by its status.json; the folder's other files go
// with it.
func (j *Janitor) visitRun(ctx context.Context, key string, now time.Time, age time.Duration, r *Report) error {
	slug, runID, ok := layout.ParseRunStatusKey(key)
	if !ok {
		return nil
	}
	var st lifecycle.RunStatus
	ver, ok, err := j.read(ctx, key, &st, r)
	if !ok || err != nil || !RunEligible(&st, now, age) {
		return err
	}
	return j.deleteRun(ctx, key, &st, slug, runID, ver, r)
}

// visitAuditDay judges an audit event by its day.
func (j *Janitor) visitAuditDay(ctx context.Context, key string, now time.Time, age time.Duration, r *Report) error {
	day, ok := layout.ParseAuditDay(key)
	if !ok {
		return nil
	}
	if !AuditDayEligible(day, now, age) {
		// Day folders list in date order: every later key is of a day at
		// least as recent, so the kind ends here, and a pass lists no
		// more of the audit log than it deletes.
		return errKindDone
	}
	// Audit events are written once (create-only) and never changed, so
	// there is no version to fence on: the day's end is the judge.
	if err := j.cfg.Store.Delete(ctx, key, storage.Condition{}); err != nil {
		return err
	}
	r.deleted(Audit, 1)
	r.Keys++
	return nil
}

// visitJob judges a job (COMPLETE, or DEAD for DeadJobs) or, for Jobs, a
// finished NLM job.
func (j *Janitor) visitJob(ctx context.Context, k Kind, key string, now time.Time, age time.Duration, r *Report) error {
	if _, ok := layout.JobIDFromKey(key); ok {
		var job lifecycle.Job
		ver, ok, err := j.read(ctx, key, &job, r)
		if !ok || err != nil || !JobEligible(&job, k == DeadJobs, now, age) {
			return err
		}
		// The matrix lets no component delete a job but the admin's
		// retention cleanup, which this is.
		if err := authority.Check(lifecycle.ActorAdmin, authority.Jobs, authority.Delete, authority.Scope{Cleanup: true}); err != nil {
			return err
		}
		return j.deleteFenced(ctx, k, key, ver, r)
	}
	id, ok := layout.ParseNLMJobKey(key)
	if !ok || k != Jobs {
		return nil
	}
	var job lifecycle.NLMJob
	ver, ok, err := j.read(ctx, key, &job, r)
	if !ok || err != nil || !NLMJobEligible(&job, now, age) {
		return err
	}
	// The job in flight's index entry should be gone with its end; a
	// writer that died before removing it left it, harmless but kept for
	// ever unless removed here, before the job it names.
	if active, err := layout.NLMActiveKey(id); err == nil {
		if err := j.cfg.Store.Delete(ctx, active, storage.Condition{}); err != nil {
			return err
		}
	}
	return j.deleteFenced(ctx, k, key, ver, r)
}

// visitIdempotency judges an idempotency record, or a run marker of its
// key.
func (j *Janitor) visitIdempotency(ctx context.Context, key string, now time.Time, age time.Duration, r *Report) error {
	if strings.HasPrefix(key, layout.IdempotencyExpiryPrefix) {
		return j.visitExpiryEntry(ctx, key, now, age, r)
	}
	if _, ok := layout.ParseIdempotencyRunKey(key); ok {
		var m idemrecord.Marker
		ver, ok, err := j.read(ctx, key, &m, r)
		if !ok || err != nil || !IdempotencyMarkerEligible(&m, now, age) {
			return err
		}
		return j.deleteFenced(ctx, Idempotency, key, ver, r)
	}
	if !layout.IsIdempotencyKey(key) {
		return nil
	}
	var rec idemrecord.Record
	ver, ok, err := j.read(ctx, key, &rec, r)
	if !ok || err != nil || !IdempotencyEligible(&rec, now, age) {
		return err
	}
	return j.deleteFenced(ctx, Idempotency, key, ver, r)
}

// read reads key into doc: ok false (and no error) when it vanished or
// does not decode, which are counted.
func (j *Janitor) read(ctx context.Context, key string, doc any, r *Report) (storage.Version, bool, error) {
	b, ver, err := j.cfg.Store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		r.Changed++
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if json.Unmarshal(b, doc) != nil {
		r.Skipped++ // the engine that reads it quarantines it
		return "", false, nil
	}
	return ver, true, nil
}

// deleteFenced deletes key if it still holds the version judged.
func (j *Janitor) deleteFenced(ctx context.Context, k Kind, key string, ver storage.Version, r *Report) error {
	_, err := j.deleteIfMatch(ctx, k, key, ver, r)
	return err
}

// deleteIfMatch is deleteFenced, telling whether the record went: a
// record written since the read is counted as changed and kept.
func (j *Janitor) deleteIfMatch(ctx context.Context, k Kind, key string, ver storage.Version, r *Report) (bool, error) {
	err := j.cfg.Store.Delete(ctx, key, storage.IfMatch(ver))
	if errors.Is(err, storage.ErrPreconditionFailed) {
		r.Changed++
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.deleted(k, 1)
	r.Keys++
	return true, nil
}

// deleteRun deletes a finished run whose status.json was judged at ver.
// The order is chosen so that a janitor that stops at any point leaves
// nothing that looks alive and nothing a reader trips on, and the next
// pass finishes the job:
//
//  1. the index entries (index/runs/{runId}.json, index/active/..., its
//     history and status entries: layout.RunIndexKeys): from
//     here on the run is not found by id, and no poll looks at it;
//  2. the status is read again, and the run left alone if it changed;
//  3. every other file of the folder (input, manifest, steps, outputs);
//  4. status.json last, conditional on the version judged. Until then the
//     folder still holds a finished status, which is what the next pass
//     lists and judges again.
//
// A terminal status is a state no writer changes (no machine has an edge
// out of one), which is what the Store contract asks of a record deleted
// by a conditional Delete; the condition catches a mistake, not a race.
func (j *Janitor) deleteRun(ctx context.Context, statusKey string, st *lifecycle.RunStatus, slug, runID string, ver storage.Version, r *Report) error {
	// Its index entries: id to agent, active, and the history lists' (a
	// run's entry under a status it left is its writer's to delete).
	keys, err := layout.TenantRunIndexKeys(st.TenantID, slug, runID, st.Status, st.StartedAt)
	if err != nil {
		// A started_at that makes no newest-first key (missing, before
		// 1970) gave the run no history or status entry either: delete the
		// others, or such a run would be judged again at every pass.
		keys, err = runIDKeys(slug, runID)
	}
	if err != nil {
		r.Skipped++
		return nil
	}
	if st.RepoID != "" {
		// Its entry among its repository's runs, written at submit.
		if k, err := layout.RepoRunsKey(st.RepoID, st.StartedAt, runID); err == nil {
			keys = append(keys, k)
		}
	}
	for _, key := range keys {
		if err := j.cfg.Store.Delete(ctx, key, storage.Condition{}); err != nil {
			return err
		}
	}
	_, cur, err := j.cfg.Store.Get(ctx, statusKey)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && cur != ver) {
		r.Changed++
		return nil
	}
	if err != nil {
		return err
	}
	prefix, err := layout.RunPrefix(slug, runID)
	if err != nil {
		return err
	}
	var files []string
	for key, err := range j.cfg.Store.List(ctx, prefix) {
		if err != nil {
			return err
		}
		if key != statusKey {
			files = append(files, key)
		}
	}
	for _, key := range files {
		if err := j.cfg.Store.Delete(ctx, key, storage.Condition{}); err != nil {
			return err
		}
	}
	err = j.cfg.Store.Delete(ctx, statusKey, storage.IfMatch(ver))
	if errors.Is(err, storage.ErrPreconditionFailed) {
		r.Changed++
		return nil
	}
	if err != nil {
		return err
	}
	r.deleted(Runs, 1)
	r.Keys += len(files) + 1
	return nil
}

// deleteArtifact deletes an artifact through the artifact store's own
// admin cleanup (docs/spec.md#artifact), the one way an artifact is
// deleted: it checks the authority matrix and the cleanup age (the kind's
// age) on a fresh read, deletes conditional on that read's version, and
// writes the artifact.delete audit event.
func (j *Janitor) deleteArtifact(ctx context.Context, cid, id string, r *Report) error {
	err := j.artifacts.Delete(ctx, lifecycle.ActorAdmin, cid, id)
	switch {
	case err == nil:
		r.deleted(Artifacts, 1)
		r.Keys++
		return nil
	case errors.Is(err, storage.ErrPreconditionFailed), errors.Is(err, storage.ErrNotFound), errors.Is(err, authority.ErrForbidden):
		r.Changed++ // rewritten, gone, or younger than read
		return nil
	case errors.Is(err, lifecycle.ErrCorrupt):
		r.Skipped++
		return nil
	}
	return err
}

// runIDKeys are the index entries of a run that its id alone names.
func runIDKeys(slug, runID string) ([]string, error) {
	id, err := layout.RunIndexKey(runID)
	if err != nil {
		return nil, err
	}
	active, err := layout.RunActiveKey(slug, runID)
	if err != nil {
		return nil, err
	}
	return []string{id, active}, nil
}
