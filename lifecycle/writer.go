package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/storage"
)

// ErrLeaseLost is matched by the error a runner gets when another runner has
// taken its run over: it must stop, and none of its later writes land.
var ErrLeaseLost = errors.New("lifecycle: lease lost")

// LeaseLostError says who holds the run now.
type LeaseLostError struct {
	RunID string
	// Epoch is the epoch this runner held; Holder and HolderEpoch the lease
	// found in the record (empty when none).
	Epoch       int64
	Holder      string
	HolderEpoch int64
}

// Error names the run, the lost epoch and the lease now in the record.
func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("lifecycle: run %s: lease epoch %d lost (now held by %q at epoch %d)", e.RunID, e.Epoch, e.Holder, e.HolderEpoch)
}

// Is matches ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// Code is RUN_LEASE_LOST.
func (e *LeaseLostError) Code() string { return CodeLeaseLost }

// maxConflicts bounds how often one status write re-reads after losing a
// compare-and-swap before it gives up.
const maxConflicts = 32

// statusWriter writes one run's status.json. It keeps the document and store
// version of its last write, so on the happy path it writes with IfMatch and
// never reads. A conflict (a cancel request, an approval, a takeover) makes it
// re-read and re-apply the change to the fresh document, and when it holds a
// lease (epoch > 0) every write first checks the lease is still its own: a
// runner that was taken over cannot write.
type statusWriter struct {
	r     *Runner
	runID string // fixed for the writer's life; read without the lock
	key   string
	// fresh: doc was just read from the store, so a change it refuses is
	// refused without reading again.
	fresh bool
	mu    sync.Mutex
	doc   RunStatus
	ver   storage.Version
	epoch int64
	// leaseUntil is the lease expiry of this writer's last write, renewedAt
	// when that write was made.
	leaseUntil time.Time
	renewedAt  time.Time
}

// apply runs change on a copy of the document and writes the result. change
// may run more than once (after a conflict) and must touch only its argument.
func (w *statusWriter) apply(ctx context.Context, actor Actor, change func(*RunStatus) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	fresh := w.fresh // else the cached document may be stale until re-read
	w.fresh = false
	for conflicts := 0; ; conflicts++ {
		doc := w.doc.clone()
		if err := w.fence(&doc); err != nil {
			return err
		}
		from := doc.Status
		if err := change(&doc); err != nil {
			if fresh {
				return err
			}
			// Someone else may have moved the run since our last write: judge
			// the change against the stored document before refusing it.
			if err := w.reloadLocked(ctx); err != nil {
				return err
			}
			fresh = true
			continue
		}
		now := w.r.now()
		if w.epoch > 0 && doc.Lease != nil { // a terminal or parking write drops the lease
			doc.Lease.ExpiresAt, doc.LastHeartbeatAt = now.Add(w.r.cfg.LeaseDuration), &now
		}
		doc.Version++
		b, err := json.Marshal(&doc)
		if err != nil {
			return fmt.Errorf("lifecycle: encode status of %s: %w", doc.RunID, err)
		}
		v, err := w.r.store.Put(ctx, w.key, b, storage.IfMatch(w.ver))
		if err == nil {
			w.doc, w.ver = doc, v
			if w.epoch > 0 && doc.Lease != nil {
				w.leaseUntil, w.renewedAt = doc.Lease.ExpiresAt, now
			}
			w.r.afterWrite(ctx, &doc, from, actor)
			return nil
		}
		if !errors.Is(err, storage.ErrPreconditionFailed) || conflicts >= maxConflicts {
			return err
		}
		if err := w.reloadLocked(ctx); err != nil {
			return err
		}
		fresh = true
	}
}

// fence refuses a write by a runner whose lease is no longer in the record.
func (w *statusWriter) fence(doc *RunStatus) error {
	if w.epoch == 0 {
		return nil
	}
	if doc.Lease == nil || doc.Lease.Owner != w.r.cfg.Owner || doc.Lease.Epoch != w.epoch {
		e := &LeaseLostError{RunID: doc.RunID, Epoch: w.epoch}
		if doc.Lease != nil {
			e.Holder, e.HolderEpoch = doc.Lease.Owner, doc.Lease.Epoch
		}
		return e
	}
	return nil
}

func (w *statusWriter) reloadLocked(ctx context.Context) error {
	doc, v, err := storage.Read[RunStatus](ctx, w.r.store, w.key)
	if err != nil {
		return err
	}
	w.doc, w.ver = doc, v
	return nil
}

// snapshot returns a copy of the last document written or read.
func (w *statusWriter) snapshot() RunStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.doc.clone()
}

// renewed is when this writer last renewed its lease.
func (w *statusWriter) renewed() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.renewedAt
}

// leaseValid tells, without I/O, whether this writer's lease is certainly
// still its own: the expiry it last wrote, less a tenth for safety, is
// ahead. No other runner takes a run over before the lease expires.
func (w *statusWriter) leaseValid() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	margin := w.r.cfg.LeaseDuration / 10
	return w.r.now().Before(w.leaseUntil.Add(-margin))
}

// confirmLease checks the lease against the store; a runner calls it before
// a side write (a step file) once leaseValid can no longer vouch for it.
func (w *statusWriter) confirmLease(ctx context.Context) error {
	if w.leaseValid() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.reloadLocked(ctx); err != nil {
		return err
	}
	doc := w.doc
	return w.fence(&doc)
}

// afterWrite records what a status write did: the audit event of seed 003
// §5.1, the metrics of seed 004 §7.1 and the run_transition log event.
func (r *Runner) afterWrite(ctx context.Context, doc *RunStatus, from string, actor Actor) {
	f := r.flowOfDoc(doc)
	r.recordAudit(ctx, storage.AuditEvent{
		Event: "run.status.update", Actor: string(actor), RunID: doc.RunID, From: from, To: doc.Status,
	})
	r.cfg.Metrics.RunTransition(f.machine, from, doc.Status)
	if from != doc.Status {
		if from != "" && !f.terminal(from) {
			r.cfg.Metrics.RunActive(from, -1)
		}
		if !f.terminal(doc.Status) {
			r.cfg.Metrics.RunActive(doc.Status, 1)
		}
		r.log.LogAttrs(ctx, slog.LevelInfo, "run_transition", slog.String("runId", doc.RunID),
			slog.String("from", from), slog.String("to", doc.Status), slog.String("initiator", string(actor)))
	}
	r.broadcast()
}

// recordAudit writes one audit event; a failure is logged, not returned,
// because the write it describes has already happened.
func (r *Runner) recordAudit(ctx context.Context, ev storage.AuditEvent) {
	ev.TS = r.now()
	if _, err := r.audit.Record(ctx, ev); err != nil {
		r.log.LogAttrs(ctx, slog.LevelError, "audit_write_failed", slog.String("runId", ev.RunID), slog.String("error", err.Error()))
	}
}

func (d *RunStatus) clone() RunStatus {
	c := *d
	c.ProposalsCreated = slices.Clone(d.ProposalsCreated)
	if c.ProposalsCreated == nil {
		c.ProposalsCreated = []string{}
	}
	c.FinishedAt = clonePtr(d.FinishedAt)
	c.Error = clonePtr(d.Error)
	c.Lease = clonePtr(d.Lease)
	c.LastHeartbeatAt = clonePtr(d.LastHeartbeatAt)
	c.CancelRequestedAt = clonePtr(d.CancelRequestedAt)
	if d.Approval != nil {
		a := *d.Approval
		a.DecidedAt = clonePtr(d.Approval.DecidedAt)
		c.Approval = &a
	}
	if d.External != nil {
		e := *d.External
		e.Deadline = clonePtr(d.External.Deadline)
		e.ReceivedAt = clonePtr(d.External.ReceivedAt)
		c.External = &e
	}
	return c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
