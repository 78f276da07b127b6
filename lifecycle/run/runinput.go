package run

import (
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The checks of the Runner's caller inputs (issue 10 F). Each public method
// that takes free text runs its check first, so a refused call writes
// nothing; the limits are those of input.go.

// checkSubmit refuses a submit whose text fields break their limits. The
// values' meaning (a known agent, a trigger of the set, JSON input, a key
// of a scheme) is Submit's check, after this one.
func checkSubmit(req *SubmitRequest) error {
	if err := codes.CheckText("agent_slug", req.AgentSlug, codes.MaxNameBytes, codes.OneLine); err != nil {
		return err
	}
	if err := codes.CheckText("trigger", req.Trigger, codes.MaxNameBytes, codes.OneLine); err != nil {
		return err
	}
	if err := codes.CheckJSON("input", req.Input, codes.MaxDocumentBytes); err != nil {
		return err
	}
	if err := codes.CheckText("idempotency_key", req.IdempotencyKey, MaxIdempotencyKeyBytes, codes.OneLine); err != nil {
		return err
	}
	return checkCaller(&req.Caller)
}

// check refuses a decision whose decided_by or reason breaks its limit.
func (d *Decision) check() error {
	if err := codes.CheckText("decided_by", d.DecidedBy, codes.MaxNameBytes, codes.OneLine); err != nil {
		return err
	}
	if err := codes.CheckText("reason", d.Reason, codes.MaxTextBytes, codes.MultiLine); err != nil {
		return err
	}
	return checkCaller(&d.Caller)
}

// check refuses an event whose type, id or source breaks its limit.
func (ev *ExternalEvent) check() error {
	if err := codes.CheckText("event_type", ev.Type, codes.MaxNameBytes, codes.OneLine); err != nil {
		return err
	}
	if err := codes.CheckText("event_id", ev.ID, codes.MaxRefBytes, codes.OneLine); err != nil {
		return err
	}
	if err := codes.CheckText("source", ev.Source, codes.MaxRefBytes, codes.OneLine); err != nil {
		return err
	}
	return checkCaller(&ev.Caller)
}

// check refuses a cancel whose reason is over MaxTextBytes or not clean
// text.
func (req *CancelRequest) check() error {
	if err := codes.CheckText("reason", req.Reason, codes.MaxTextBytes, codes.MultiLine); err != nil {
		return err
	}
	return checkCaller(&req.Caller)
}

// checkCaller refuses a Caller that breaks the input limits.
func checkCaller(c *Caller) error {
	tc := lifecycle.TransitionContext{UserID: c.UserID, Initiator: c.Initiator, Metadata: c.Metadata}
	return codes.CheckContext(&tc)
}
