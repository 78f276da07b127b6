package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// controller makes the changes asked of a run from outside (cancel,
// approve, reject, deliver an external event) and lets the loop and the
// run's execution here know.
type controller struct {
	now      func() time.Time
	store    *storage.Store
	cat      *catalog
	reads    *reads
	statuses *statuses
	writers  *writers
	ender    *ender
	execs    *executions
	inbox    *inbox
}

// apply loads a run for an operation and applies change to it as b's
// actor, with b's transition context, with compare-and-swap; then it lets
// this runner's loop and execution know.
func (ct *controller) apply(ctx context.Context, runID string, b by, change func(ctx context.Context, f *flow, d *lifecycle.RunStatus) error) (lifecycle.RunStatus, error) {
	slug, key, err := ct.reads.locate(ctx, runID)
	if err != nil {
		return lifecycle.RunStatus{}, err
	}
	if _, ok := ct.cat.agents[slug]; !ok {
		return lifecycle.RunStatus{}, fmt.Errorf("%w: %s belongs to agent %s, unknown to this runner", lifecycle.ErrRunNotFound, runID, slug)
	}
	w := ct.writers.newWriter(slug, runID, key, nil, "") // the first apply reads
	var from string
	err = w.apply(ctx, b, func(ctx context.Context, d *lifecycle.RunStatus) error {
		from = d.Status
		return change(ctx, ct.cat.flowOfDoc(d), d)
	})
	var ce *lifecycle.QuarantinedError
	switch {
	case errors.Is(err, storage.ErrNotFound):
		if qe := ct.statuses.findQuarantined(ctx, runID, key); qe != nil {
			return lifecycle.RunStatus{}, qe
		}
		return lifecycle.RunStatus{}, fmt.Errorf("%w: %s", lifecycle.ErrRunNotFound, runID)
	case errors.As(err, &ce):
		qerr := ct.statuses.quarantineRun(ctx, slug, runID, ce)
		if errors.Is(qerr, storage.ErrPreconditionFailed) {
			// It changed since the read (a repair, another quarantine):
			// nothing was written; the caller may try again.
			return lifecycle.RunStatus{}, ce
		}
		return lifecycle.RunStatus{}, qerr
	case err != nil:
		return lifecycle.RunStatus{}, err
	}
	after := w.snapshot()
	f := ct.cat.flowOfDoc(&after)
	if f.terminal(after.Status) {
		ct.ender.cleanup(ctx, slug, runID, "", "")
		ct.ender.finished(ctx, after)
	} else if !f.executing(from) || after.Lease == nil {
		ct.inbox.hand(candidate{slug: slug, w: w})
	}
	return after, nil
}

// CancelRequest asks Cancel to stop a run. Cancel refuses one with an
// *lifecycle.InputError, writing nothing, when Reason is over MaxTextBytes
// or not clean text (it may span lines), or its Caller breaks its limits.
type CancelRequest struct {
	// Reason becomes the run's cancel_reason.
	Reason string
	lifecycle.Caller
}

// cancel: see Runner.Cancel.
func (ct *controller) cancel(ctx context.Context, runID string, actor lifecycle.Actor, req CancelRequest) (lifecycle.RunStatus, error) {
	if err := req.check(); err != nil {
		return lifecycle.RunStatus{}, err
	}
	doc, err := ct.apply(ctx, runID, callerBy(&req.Caller, actor, lifecycle.InitiatorUser), func(ctx context.Context, f *flow, d *lifecycle.RunStatus) error {
		if f.cancel == "" {
			return &unsupportedError{Machine: f.machine, Operation: "cancel"}
		}
		now := ct.now()
		switch {
		case f.compensating != "" && d.Status == f.compensating:
			// Being undone already: it ends canceled, or failed when a
			// failure started the compensations.
		case f.executing(d.Status) && f.requestCancel != "":
			if d.Status == f.cancelRq {
				return nil // asked already
			}
			if err := f.fire(ctx, d, f.requestCancel, actor); err != nil {
				return err
			}
		case f.executing(d.Status) && d.Lease != nil:
			// The approval machine has no cancel_requested state: the flag
			// asks, and the executing runner makes the move. The move is
			// tried on a copy, so a refusal is the machine's own error.
			probe := *d
			if err := f.fire(ctx, &probe, f.cancel, actor); err != nil {
				return err
			}
		default:
			a, _ := ct.cat.agent(d.AgentSlug)
			if err := cancelOrCompensate(ctx, f, d, a, actor, ct.ender); err != nil {
				return err
			}
		}
		d.CancelRequested, d.CancelReason, d.CancelRequestedAt = true, req.Reason, &now
		return nil
	})
	if err != nil {
		return doc, err
	}
	ct.execs.stop(runID, errCanceled)
	return doc, nil
}

// Decision is an owner's answer at an approval gate. Approve and Reject
// refuse one with an *lifecycle.InputError, writing nothing, when
// DecidedBy is over MaxNameBytes or Reason over MaxTextBytes, or either is
// not clean text (Reason may span lines), when Payload is over
// MaxDocumentBytes or not clean UTF-8, or its Caller breaks its limits; a
// Payload that is not JSON is a *RequestError.
//
// An approved Decision is handed to the steps after the gate
// (StepInput.Approval), its Caller left out: that part goes to the audit
// log only.
type Decision struct {
	// DecidedBy names who decided, e.g. "owner".
	DecidedBy string
	Reason    string
	// Payload is optional JSON the next steps are given, e.g. the edits
	// the approver made; JSON null is none. It is kept beside the run
	// (the status names it by its sha256), so a runner that takes the
	// run over hands it on too.
	Payload json.RawMessage
	lifecycle.Caller
}

// by is the write of a decision: its context names the approval decided
// and its payload.
func (dec *Decision) by(actor lifecycle.Actor, decision string, now time.Time, wd *waitData) by {
	b := callerBy(&dec.Caller, actor, lifecycle.InitiatorApproval)
	b.tc.Approval = &lifecycle.Approval{Decision: decision, DecidedAt: &now, DecidedBy: dec.DecidedBy, Reason: dec.Reason,
		PayloadSHA256: wd.sha, PayloadBytes: wd.bytesLen()}
	return b
}

// approve: see Runner.Approve.
func (ct *controller) approve(ctx context.Context, runID string, actor lifecycle.Actor, dec Decision) (lifecycle.RunStatus, error) {
	wd, err := dec.check()
	if err != nil {
		return lifecycle.RunStatus{}, err
	}
	now := ct.now()
	return ct.apply(ctx, runID, dec.by(actor, "approved", now, wd), func(ctx context.Context, f *flow, d *lifecycle.RunStatus) error {
		if f.approve == "" {
			return &unsupportedError{Machine: f.machine, Operation: "approve"}
		}
		if err := f.fire(ctx, d, f.approve, actor); err != nil {
			return err
		}
		// The payload lands before the status that names it.
		if err := wd.write(ctx, ct.store, d.AgentSlug, d.RunID); err != nil {
			return err
		}
		decide(d, "approved", dec, now, wd)
		return nil
	})
}

// reject: see Runner.Reject.
func (ct *controller) reject(ctx context.Context, runID string, actor lifecycle.Actor, dec Decision) (lifecycle.RunStatus, error) {
	wd, err := dec.check()
	if err != nil {
		return lifecycle.RunStatus{}, err
	}
	now := ct.now()
	return ct.apply(ctx, runID, dec.by(actor, "rejected", now, wd), func(ctx context.Context, f *flow, d *lifecycle.RunStatus) error {
		if f.reject == "" {
			return &unsupportedError{Machine: f.machine, Operation: "reject"}
		}
		probe := *d // the move, tried first: a refused one writes no payload
		if err := f.fire(ctx, &probe, f.reject, actor); err != nil {
			return err
		}
		if err := wd.write(ctx, ct.store, d.AgentSlug, d.RunID); err != nil {
			return err
		}
		decide(d, "rejected", dec, now, wd)
		a, _ := ct.cat.agent(d.AgentSlug)
		return failOrCompensate(ctx, f, d, a, actor, f.reject,
			lifecycle.NewRunError(codes.ApprovalRejected, "%s", orDefault(dec.Reason, "rejected")), ct.ender)
	})
}

// decide records the decision in the status. A gate parked by a release
// that did not keep its step is taken as parked after the steps counted.
func decide(d *lifecycle.RunStatus, decision string, dec Decision, now time.Time, wd *waitData) {
	if d.Approval == nil {
		d.Approval = &lifecycle.Approval{}
	}
	a := d.Approval
	a.Decision, a.DecidedAt, a.DecidedBy, a.Reason = decision, &now, dec.DecidedBy, dec.Reason
	a.PayloadSHA256, a.PayloadBytes = wd.sha, wd.bytesLen()
	if a.AfterStep == 0 {
		a.AfterStep = d.StepsCompleted
	}
}

// ExternalEvent is an event a waiting run receives (docs/spec.md#approval-run). Deliver
// refuses one with an *lifecycle.InputError, writing nothing, when Type is
// over MaxNameBytes, ID or Source over MaxRefBytes, or any is not one line
// of clean text, when Payload is over MaxDocumentBytes or not clean UTF-8,
// or its Caller breaks its limits; a Payload that is not JSON is a
// *RequestError.
//
// The event is handed to the steps after the wait (StepInput.Event), its
// Caller left out.
type ExternalEvent struct {
	// Type must be the event type the run waits for.
	Type   string
	ID     string
	Source string
	// Payload is the event's JSON, e.g. a callback's body; JSON null is
	// none. It is kept beside the run like a Decision's.
	Payload json.RawMessage
	lifecycle.Caller
}

// deliver: see Runner.Deliver.
func (ct *controller) deliver(ctx context.Context, runID string, actor lifecycle.Actor, ev ExternalEvent) (lifecycle.RunStatus, error) {
	wd, err := ev.check()
	if err != nil {
		return lifecycle.RunStatus{}, err
	}
	now := ct.now()
	b := callerBy(&ev.Caller, actor, lifecycle.InitiatorWebhook)
	b.tc.External = &lifecycle.ExternalWait{EventType: ev.Type, EventID: ev.ID, Source: ev.Source, ReceivedAt: &now,
		PayloadSHA256: wd.sha, PayloadBytes: wd.bytesLen()}
	return ct.apply(ctx, runID, b, func(ctx context.Context, f *flow, d *lifecycle.RunStatus) error {
		if f.deliver == "" {
			return &unsupportedError{Machine: f.machine, Operation: "deliver"}
		}
		if d.External != nil && ev.Type != d.External.EventType && d.Status == string(machine.ApprovalWaitingExternal) {
			return &RequestError{Field: "event type", Reason: fmt.Sprintf("run waits for %q, not %q", d.External.EventType, ev.Type)}
		}
		if err := f.fire(ctx, d, f.deliver, actor); err != nil {
			return err
		}
		if err := wd.write(ctx, ct.store, d.AgentSlug, d.RunID); err != nil {
			return err
		}
		if d.External == nil {
			d.External = &lifecycle.ExternalWait{EventType: ev.Type}
		}
		x := d.External
		x.EventID, x.Source, x.ReceivedAt = ev.ID, ev.Source, &now
		x.PayloadSHA256, x.PayloadBytes = wd.sha, wd.bytesLen()
		if x.AfterStep == 0 {
			x.AfterStep = d.StepsCompleted
		}
		return nil
	})
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// check refuses a decision whose decided_by, reason or payload breaks its
// limit, and returns its payload ready to write.
func (d *Decision) check() (*waitData, error) {
	if err := codes.CheckText("decided_by", d.DecidedBy, codes.MaxNameBytes, codes.OneLine); err != nil {
		return nil, err
	}
	if err := codes.CheckText("reason", d.Reason, codes.MaxTextBytes, codes.MultiLine); err != nil {
		return nil, err
	}
	if err := checkCaller(&d.Caller); err != nil {
		return nil, err
	}
	return newWaitData(d.Payload)
}

// check refuses an event whose type, id, source or payload breaks its
// limit, and returns its payload ready to write.
func (ev *ExternalEvent) check() (*waitData, error) {
	if err := codes.CheckText("event_type", ev.Type, codes.MaxNameBytes, codes.OneLine); err != nil {
		return nil, err
	}
	if err := codes.CheckText("event_id", ev.ID, codes.MaxRefBytes, codes.OneLine); err != nil {
		return nil, err
	}
	if err := codes.CheckText("source", ev.Source, codes.MaxRefBytes, codes.OneLine); err != nil {
		return nil, err
	}
	if err := checkCaller(&ev.Caller); err != nil {
		return nil, err
	}
	return newWaitData(ev.Payload)
}

// check refuses a cancel whose reason is over MaxTextBytes or not clean
// text.
func (req *CancelRequest) check() error {
	if err := codes.CheckText("reason", req.Reason, codes.MaxTextBytes, codes.MultiLine); err != nil {
		return err
	}
	return checkCaller(&req.Caller)
}
