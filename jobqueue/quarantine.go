package jobqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// quarantine moves poison records aside (core.Quarantiner), logged and
// counted, and tells a reader of a job whether its record is there.
type quarantine struct {
	store *storage.Store
	mover *core.Quarantiner
	obs   *observer
}

// poison quarantines the record of a *lifecycle.QuarantinedError and turns the
// error into ErrNotFound for the caller, which goes on as if the record were
// gone: a poison record never blocks anything. Other errors pass.
func (q *quarantine) poison(ctx context.Context, err error) error {
	var ce *lifecycle.QuarantinedError
	if !errors.As(err, &ce) {
		return err
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

// QuarantinedError is the error of a job whose record was poison and was
// moved under quarantine/ (by this read or an earlier one): Get
// and Requeue give it, as the Runner gives run.QuarantinedError for a run,
// so a client learns the job is quarantined, not that it never existed. An
// operator may repair and restore the record (a restore (Store.Restore of the HTTP API)). It matches
// lifecycle.ErrCorrupt and, as a job the queue can no longer see,
// storage.ErrNotFound; its code is RECORD_QUARANTINED (410).
type QuarantinedError struct {
	JobID string
	// Key is where the record was; QKey where its copy is kept.
	Key, QKey string
	Reason    string
}

// Error names the job and the reason.
func (e *QuarantinedError) Error() string {
	msg := "jobqueue: job " + e.JobID + ": record quarantined"
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.QKey != "" {
		msg += " (at " + e.QKey + ")"
	}
	return msg
}

// Is matches lifecycle.ErrCorrupt and storage.ErrNotFound.
func (e *QuarantinedError) Is(target error) bool {
	return target == lifecycle.ErrCorrupt || target == storage.ErrNotFound
}

// Code is RECORD_QUARANTINED, as lifecycle.QuarantinedError's.
func (e *QuarantinedError) Code() string { return (&lifecycle.QuarantinedError{}).Code() }

// quarantinedOr turns the not-found of a job whose record is in quarantine
// into a *QuarantinedError; any other error is returned as it is.
func (q *quarantine) quarantinedOr(ctx context.Context, jobID string, err error) error {
	if !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	key, kerr := layout.JobKey(jobID)
	if kerr != nil {
		return err
	}
	if qkey, reason, ok := records.FindQuarantined(ctx, q.store, key); ok {
		return &QuarantinedError{JobID: jobID, Key: key, QKey: qkey, Reason: reason}
	}
	return err
}

// count is how many records were moved to quarantine.
func (q *quarantine) count() int64 { return q.mover.Count() }
