package run

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// control loads a run for an operation by actor and applies change to it as
// that actor, with compare-and-swap; then it lets this runner's loop and
// execution know.
func (r *Runner) control(ctx context.Context, runID string, actor lifecycle.Actor, change func(f *flow, d *Status) error) (Status, error) {
	slug, key, err := r.locate(ctx, runID)
	if err != nil {
		return Status{}, err
	}
	agent, ok := r.agents[slug]
	if !ok {
		return Status{}, fmt.Errorf("%w: %s belongs to agent %s, unknown to this runner", ErrNotFound, runID, slug)
	}
	w := r.newWriter(slug, runID, key, nil, "") // the first apply reads
	f := &agent.flow
	var from string
	err = w.apply(ctx, actor, func(d *Status) error {
		from = d.Status
		return change(f, d)
	})
	var ce *storage.CorruptError
	switch {
	case errors.Is(err, storage.ErrNotFound):
		if qe := r.findQuarantined(ctx, runID, key); qe != nil {
			return Status{}, qe
		}
		return Status{}, fmt.Errorf("%w: %s", ErrNotFound, runID)
	case errors.As(err, &ce):
		return Status{}, r.quarantineRun(ctx, slug, runID, ce)
	case err != nil:
		return Status{}, err
	}
	after := w.snapshot()
	if f.terminal(after.Status) {
		r.cleanup(ctx, slug, runID, "", "")
		r.finished(ctx, after)
	} else if !f.executing(from) || after.Lease == nil {
		r.hand(candidate{slug: slug, w: w})
	}
	return after, nil
}

// Cancel asks a run to stop (seed 001). On the cancel-aware machine a queued
// run is canceled at once and a running one moves to cancel_requested: its
// step's context is canceled and the runner ends it canceled, unless the
// step finishes first (then it may still succeed or fail, as seed 001
// allows). On the approval machine a run that is not executing is cancelled
// at once, and an executing one when its runner notices. The canonical
// machine has no cancel: [ErrUnsupported]. A reason over MaxTextBytes or
// not clean text is an *InputError, and nothing is written.
func (r *Runner) Cancel(ctx context.Context, runID string, actor lifecycle.Actor, reason string) (Status, error) {
	if err := checkReason(reason); err != nil {
		return Status{}, err
	}
	doc, err := r.control(ctx, runID, actor, func(f *flow, d *Status) error {
		if f.cancel == "" {
			return &unsupportedError{Machine: f.machine, Operation: "cancel"}
		}
		now := r.now()
		switch {
		case f.executing(d.Status) && f.requestCancel != "":
			if d.Status == f.cancelRq {
				return nil // asked already
			}
			if err := f.fire(ctx, d, f.requestCancel, actor); err != nil {
				return err
			}
		case f.executing(d.Status) && d.Lease != nil:
			// The approval machine has no cancel_requested state: the flag
			// asks, and the executing runner makes the move.
			if err := lifecycle.ApprovalRun().CheckActor(lifecycle.ApprovalRunState(d.Status), lifecycle.ApprovalCancelled, actor); err != nil {
				return err
			}
		default:
			if err := f.fire(ctx, d, f.cancel, actor); err != nil {
				return err
			}
			r.finishFields(d, nil)
		}
		d.CancelRequested, d.CancelReason, d.CancelRequestedAt = true, reason, &now
		return nil
	})
	if err != nil {
		return doc, err
	}
	r.mu.Lock()
	x := r.executing[runID]
	r.mu.Unlock()
	if x != nil {
		x.stop(errCanceled)
	}
	return doc, nil
}

// Decision is an owner's answer at an approval gate. Approve and Reject
// refuse one with an *InputError, writing nothing, when DecidedBy is over
// MaxNameBytes or Reason over MaxTextBytes, or either is not clean text
// (Reason may span lines).
type Decision struct {
	// DecidedBy names who decided, e.g. "owner".
	DecidedBy string
	Reason    string
}

// Approve resumes a run waiting at an approval gate (awaiting_approval →
// running). A runner then executes the steps left; when the gate followed
// the last step it completes the run, writing its manifest.
func (r *Runner) Approve(ctx context.Context, runID string, actor lifecycle.Actor, dec Decision) (Status, error) {
	if err := dec.check(); err != nil {
		return Status{}, err
	}
	return r.control(ctx, runID, actor, func(f *flow, d *Status) error {
		if f.approve == "" {
			return &unsupportedError{Machine: f.machine, Operation: "approve"}
		}
		if err := f.fire(ctx, d, f.approve, actor); err != nil {
			return err
		}
		r.decide(d, "approved", dec)
		return nil
	})
}

// Reject fails a run waiting at an approval gate with APPROVAL_REJECTED.
func (r *Runner) Reject(ctx context.Context, runID string, actor lifecycle.Actor, dec Decision) (Status, error) {
	if err := dec.check(); err != nil {
		return Status{}, err
	}
	return r.control(ctx, runID, actor, func(f *flow, d *Status) error {
		if f.reject == "" {
			return &unsupportedError{Machine: f.machine, Operation: "reject"}
		}
		if err := f.fire(ctx, d, f.reject, actor); err != nil {
			return err
		}
		r.decide(d, "rejected", dec)
		r.finishFields(d, lifecycle.NewRunError(lifecycle.CodeApprovalRejected, "%s", orDefault(dec.Reason, "rejected")))
		return nil
	})
}

func (r *Runner) decide(d *Status, decision string, dec Decision) {
	now := r.now()
	if d.Approval == nil {
		d.Approval = &lifecycle.Approval{}
	}
	d.Approval.Decision, d.Approval.DecidedAt, d.Approval.DecidedBy, d.Approval.Reason = decision, &now, dec.DecidedBy, dec.Reason
}

// ExternalEvent is an event a waiting run receives (seed 004 §2.2). Deliver
// refuses one with an *InputError, writing nothing, when Type is over
// MaxNameBytes, ID or Source over MaxRefBytes, or any is not one line of
// clean text.
type ExternalEvent struct {
	// Type must be the event type the run waits for.
	Type   string
	ID     string
	Source string
}

// Deliver hands a run the external event it waits for (waiting_external →
// running); a runner then goes on as after an approval.
func (r *Runner) Deliver(ctx context.Context, runID string, actor lifecycle.Actor, ev ExternalEvent) (Status, error) {
	if err := ev.check(); err != nil {
		return Status{}, err
	}
	return r.control(ctx, runID, actor, func(f *flow, d *Status) error {
		if f.deliver == "" {
			return &unsupportedError{Machine: f.machine, Operation: "deliver"}
		}
		if d.External != nil && ev.Type != d.External.EventType && d.Status == string(lifecycle.ApprovalWaitingExternal) {
			return &RequestError{Field: "event type", Reason: fmt.Sprintf("run waits for %q, not %q", d.External.EventType, ev.Type)}
		}
		if err := f.fire(ctx, d, f.deliver, actor); err != nil {
			return err
		}
		now := r.now()
		if d.External == nil {
			d.External = &lifecycle.ExternalWait{EventType: ev.Type}
		}
		d.External.EventID, d.External.Source, d.External.ReceivedAt = ev.ID, ev.Source, &now
		return nil
	})
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
