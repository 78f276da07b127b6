package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/storage"
)

// SweepReport counts what Sweep repaired.
type SweepReport struct {
	Jobs    int // jobs read
	Rescued int // orphans moved to RETRY_BACKOFF
	Relaned int // lane entries recreated
	Buried  int // FAILED jobs moved to DEAD
	// Quarantined counts poison job records moved to quarantine/.
	Quarantined int
	// Skipped counts jobs the sweep could not repair (logged at WARN); the
	// sweep goes on past them.
	Skipped int
}

// Sweep is the slow repair pass behind the fast paths, for what a worker
// that died between two writes can leave: it reads every job and rescues
// orphans whose lease expired (when no claim on their agent's lock did),
// recreates missing ready-lane entries, buries FAILED jobs and re-emits
// missing audit events of each job's last write. It costs a scan of the
// jobs; workers run it in batches through SweepIfDue.
func (q *Queue) Sweep(ctx context.Context) (SweepReport, error) {
	r, _, err := q.sweep(ctx, "", 0)
	return r, err
}

// sweep sweeps the jobs whose keys sort after after, at most limit of them
// (0: no limit). next is the key of the last job swept when the limit cut
// the pass short, or "" when the pass reached the end.
func (q *Queue) sweep(ctx context.Context, after string, limit int) (r SweepReport, next string, err error) {
	last := ""
	for key, err := range q.store.List(ctx, storage.JobsPrefix) {
		if err != nil {
			return r, "", err
		}
		id, ok := jobIDFromKey(key)
		if !ok || key <= after {
			continue
		}
		if limit > 0 && r.Jobs == limit {
			return r, last, nil // more jobs follow
		}
		d, _, err := q.read(ctx, id)
		if errors.Is(err, storage.ErrCorrupt) {
			r.Quarantined++
		}
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return r, "", err
		}
		r.Jobs++
		last = key
		if err := q.sweepJob(ctx, &d, &r); err != nil {
			if ctx.Err() != nil || errors.Is(err, storage.ErrUnavailable) || storage.Transient(err) {
				return r, "", err // the store, not the job: the next sweep resumes here
			}
			// One job that cannot be repaired must not stop the sweep of
			// every other job for good.
			r.Skipped++
			q.log.LogAttrs(ctx, slog.LevelWarn, "sweep_skipped", slog.String("job_id", d.JobID), slog.String("error", err.Error()))
		}
	}
	return r, "", nil
}

// sweepJob repairs one job as Sweep describes.
func (q *Queue) sweepJob(ctx context.Context, d *jobDoc, r *SweepReport) error {
	q.ensureAudited(ctx, d)
	now := q.clock.Now()
	switch {
	case pipelineState(d.Status) && (d.Lease == nil || !now.Before(d.Lease.ExpiresAt)):
		if err := q.rescue(ctx, d.JobID, 0); err != nil {
			return err
		}
		r.Rescued++
	case (d.Status == JobQueued || d.Status == JobRetryBackoff) && d.ReadyKey != "":
		_, _, err := q.store.Get(ctx, d.ReadyKey)
		if errors.Is(err, storage.ErrNotFound) {
			at, _, ok := parseLaneKey(d.ReadyKey)
			if !ok {
				return fmt.Errorf("jobqueue: job %s has a malformed ready key %q", d.JobID, d.ReadyKey)
			}
			if err := q.putLane(ctx, d.ReadyKey, d.JobID, at); err != nil {
				return err
			}
			q.agent(d.AgentSlug).forget()
			r.Relaned++
		} else if err != nil {
			return err
		}
	case d.Status == JobFailed:
		if _, err := q.bury(ctx, d.JobID, nil, ""); err != nil {
			return err
		}
		r.Buried++
	}
	return nil
}

// sweepKey holds the sweep lease: who swept last and until when no other
// worker need sweep (storage.SweepLeaseKey, outside jobs/).
const sweepKey = storage.SweepLeaseKey

// sweepLease is the value of sweepKey.
type sweepLease struct {
	storage.Meta
	Owner     string    `json:"owner"`
	ExpiresAt time.Time `json:"expires_at"`
	// Cursor is the key of the last job swept when a batch ended before the
	// jobs did; the next sweep goes on after it.
	Cursor string `json:"cursor,omitempty"`
}

var errSweptRecently = errors.New("swept recently")

// SweepIfDue sweeps the next Config.SweepBatch jobs unless a worker
// sharing the store has swept within every: it takes the sweep lease
// (create-only, or compare-and-swap of an expired one) for every, and only
// the worker that takes it sweeps. So N workers calling it every minute
// read one batch of jobs a minute between them, not N scans of every job;
// the lease keeps the cursor, so the batches go round all the jobs. The
// lease is not given back: its expiry spaces the sweeps, and a worker that
// dies while sweeping is followed by the next one after every. swept tells
// whether this call swept.
func (q *Queue) SweepIfDue(ctx context.Context, worker string, every time.Duration) (r SweepReport, swept bool, err error) {
	if err := storage.ValidateID("worker id", worker); err != nil {
		return r, false, err
	}
	if every <= 0 {
		return r, false, fmt.Errorf("jobqueue: sweep interval %s is not positive", every)
	}
	now := q.clock.Now().UTC()
	lease := sweepLease{Owner: worker, ExpiresAt: now.Add(every)}
	rec := &core.Record[sweepLease, *sweepLease]{Store: q.store, Key: sweepKey}
	for range 2 { // a junk lease is quarantined and the lease made anew once
		_, err = rec.Create(ctx, lease)
		if errors.Is(err, storage.ErrPreconditionFailed) {
			_, _, err = rec.Apply(ctx, func(l *sweepLease) error {
				if now.Before(l.ExpiresAt) {
					return errSweptRecently
				}
				lease.Cursor = l.Cursor
				l.Owner, l.ExpiresAt = worker, lease.ExpiresAt
				return nil
			})
			if errors.Is(err, errSweptRecently) {
				return r, false, nil
			}
		}
		if err = q.poison(ctx, err); !errors.Is(err, storage.ErrNotFound) {
			break
		}
	}
	if err != nil {
		return r, false, err
	}
	r, next, err := q.sweep(ctx, lease.Cursor, q.cfg.SweepBatch)
	if err != nil {
		return r, true, err
	}
	_, _, err = rec.Apply(ctx, func(l *sweepLease) error {
		if l.Owner != worker || !l.ExpiresAt.Equal(lease.ExpiresAt) {
			return errSweptRecently // our lease ran out and another worker swept on
		}
		l.Cursor = next
		return nil
	})
	if errors.Is(err, errSweptRecently) {
		err = nil
	}
	return r, true, err
}
