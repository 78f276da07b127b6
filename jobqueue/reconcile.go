package jobqueue

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// The reconcile pass walks every job record, history included, and
// repairs each job in flight that the invariant of repair.go misses: a
// job in no lane and named by no lock. The sweep cannot see such a job
// (it reads only what queue/ names), and it exists only when the store
// lost a record: an agent's lock lost while its job ran, or a lane entry
// lost while its job waited (a MinIO cluster loses an object whose
// conditional write a killed process cut: docs/stores.md). Its cost is the
// history's, once; so it runs by hand after a store incident
// (Operator.Reconcile, `conveyor reconcile`), and by itself only once the
// queue has seen such a loss: a lock read missing for sure, or found as
// junk, asks for one (reconcileAsked), and the sweep's turn carries it out
// a batch at a time, its place kept in the sweep's lease so any process
// that sweeps next goes on with it.

// reconcileAsked is set by whoever sees the store lose a queue object,
// and taken by the sweep when it starts a reconcile.
type reconcileAsked struct{ atomic.Bool }

// reconcile repairs the jobs whose keys sort after after, at most limit
// of them (0: every one). next is the key of the last job looked at when
// the limit cut the pass short, or "" when it reached the end.
func (q *sweeper) reconcile(ctx context.Context, after string, limit int) (r SweepReport, next string, err error) {
	seen := map[string]string{}
	n := 0
	for key, err := range q.store.ListAfter(ctx, layout.JobsPrefix, after) {
		if err != nil {
			return r, "", err
		}
		jobID, ok := layout.JobIDFromKey(key)
		if !ok {
			continue // junk: not a job's key
		}
		if limit > 0 && n == limit {
			return r, after, nil
		}
		n++
		after = key
		d, err := q.sweepRead(ctx, jobID, seen, &r)
		if err == nil && d != nil {
			err = q.sweepJob(ctx, d, "", &r)
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, storage.ErrUnavailable) || storage.Transient(err) {
				return r, "", err
			}
			if errors.Is(err, lifecycle.ErrCorrupt) {
				continue // quarantined, and counted
			}
			r.Skipped++
			q.Logger.LogAttrs(ctx, slog.LevelWarn, "reconcile_skipped", slog.String("key", key), slog.String("error", err.Error()))
		}
	}
	return r, "", nil
}

// add counts o's work in r too.
func (r *SweepReport) add(o SweepReport) {
	r.Entries += o.Entries
	r.Jobs += o.Jobs
	r.Rescued += o.Rescued
	r.Relaned += o.Relaned
	r.Buried += o.Buried
	r.Dropped += o.Dropped
	r.Quarantined += o.Quarantined
	r.Skipped += o.Skipped
}
