package jobqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/internal/layout"
	quarantinepkg "github.com/runconveyor/conveyor/internal/quarantine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// quarantine moves poison records aside (quarantine.Mover), logged and
// counted, and tells a reader of a job whether its record is there.
type quarantine struct {
	store *storage.Store
	mover *quarantinepkg.Mover
	obs   *observer
}

// poison quarantines the record of a *lifecycle.QuarantinedError and turns the
// error into ErrNotFound for the caller, which goes on as if the record were
// gone: a poison record never blocks anything. A later release's job
// record (errNewerRecord) is not poison: its error is returned, matching
// neither, and the record left alone. Other errors pass.
func (q *quarantine) poison(ctx context.Context, err error) error {
	var ce *lifecycle.QuarantinedError
	if !errors.As(err, &ce) {
		return err
	}
	if ne, ok := errors.AsType[*newerRecordError](ce.Err); ok {
		return ne // a later release's record: not poison, not this release's to move
	}
	qkey, qerr := q.mover.Move(ctx, ce)
	if qerr != nil && !errors.Is(qerr, storage.ErrPreconditionFailed) {
		return qerr
	}
	if qerr == nil {
		q.obs.quarantined(ce.Key)
	}
	return fmt.Errorf("jobqueue: %w (quarantined at %s): %w", storage.ErrNotFound, qkey, err)
}

// quarantinedOr turns the not-found of a job whose record is in quarantine
// into one that also matches a *lifecycle.QuarantinedError (the job's id,
// where its copy is, why); any other error is returned as it is.
func (q *quarantine) quarantinedOr(ctx context.Context, jobID string, err error) error {
	if !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	key, kerr := layout.JobKey(jobID)
	if kerr != nil {
		return err
	}
	if qkey, reason, ok := records.FindQuarantined(ctx, q.store, key); ok {
		// still a job the queue cannot see: it matches storage.ErrNotFound too
		return fmt.Errorf("jobqueue: job %s: %w: %w", jobID, storage.ErrNotFound,
			&lifecycle.QuarantinedError{ID: jobID, Key: key, QKey: qkey, Reason: reason})
	}
	return err
}

// count is how many records were moved to quarantine.
func (q *quarantine) count() int64 { return q.mover.Count() }
