package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// dispatch offers e to Config.Dispatch and records the job it answers on
// the entry. A failure is logged, not returned: the entry is stored and
// accepted whatever the job does, and DispatchPending offers it again.
func (b *Box) dispatch(ctx context.Context, e lifecycle.InboxEntry) lifecycle.InboxEntry {
	if b.cfg.Dispatch == nil || e.JobID != "" {
		return e
	}
	jobID, err := b.cfg.Dispatch(ctx, e)
	if err == nil && jobID != "" {
		err = b.linkJob(ctx, e.ID, jobID)
	}
	if err != nil {
		b.cfg.Logger.ErrorContext(ctx, "inbox: the entry's job was not enqueued; the next pass retries", "entry_id", e.ID, "err", err)
		return e
	}
	e.JobID = jobID
	return e
}

// errOtherJob refuses to link an entry already linked to another job.
var errOtherJob = errors.New("inbox: the entry names another job")

// linkJob records jobID on the live entry id: no state change and no
// audit event, only the link. The same id again writes nothing.
func (b *Box) linkJob(ctx context.Context, id, jobID string) error {
	key, err := layout.InboxKey(id)
	if err != nil {
		return err
	}
	_, _, err = (&fence.Record[entryDoc, *entryDoc]{Store: b.cfg.Store, Key: key}).Apply(ctx, func(d *entryDoc) error {
		switch d.JobID {
		case jobID:
			return errSkip
		case "":
			d.JobID = jobID
			return nil
		}
		return fmt.Errorf("%w: %s names %s, not %s", errOtherJob, id, d.JobID, jobID)
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	return err
}

// DispatchPending offers every pending entry that names no job to
// Config.Dispatch again, as Submit did, and records the jobs it answers:
// the retry of a dispatch that failed (the job store was down) or whose
// link was not written (the process died between the two). It returns the
// ids of the entries it linked; without Config.Dispatch it reads nothing.
// ExpireDue does the same for the entries it reads, in its own listing.
func (b *Box) DispatchPending(ctx context.Context) ([]string, error) {
	if b.cfg.Dispatch == nil {
		return nil, nil
	}
	var linked []string
	var errs []error
	for e, err := range b.List(ctx, ListOptions{Status: lifecycle.InboxPending}) {
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return linked, err
		}
		if e.JobID != "" {
			continue
		}
		jobID, err := b.cfg.Dispatch(ctx, e)
		if err == nil && jobID != "" {
			if err = b.linkJob(ctx, e.ID, jobID); err == nil {
				linked = append(linked, e.ID)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("inbox: entry %s: %w", e.ID, err))
		}
	}
	return linked, errors.Join(errs...)
}
