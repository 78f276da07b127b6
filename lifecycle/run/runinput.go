package run

import "github.com/runconveyor/conveyor/lifecycle"

// The checks of the Runner's caller inputs (issue 10 F). Each public method
// that takes free text runs its check first, so a refused call writes
// nothing; the limits are those of input.go.

// check refuses a submit whose text fields break their limits. The
// values' meaning (a known agent, a trigger of the set, JSON input, a key
// of a scheme) is Submit's check, after this one.
func (req *SubmitRequest) check() error {
	if err := lifecycle.CheckText("agent_slug", req.AgentSlug, lifecycle.MaxNameBytes, lifecycle.OneLine); err != nil {
		return err
	}
	if err := lifecycle.CheckText("trigger", req.Trigger, lifecycle.MaxNameBytes, lifecycle.OneLine); err != nil {
		return err
	}
	if err := lifecycle.CheckJSON("input", req.Input, lifecycle.MaxDocumentBytes); err != nil {
		return err
	}
	if err := lifecycle.CheckText("idempotency_key", req.IdempotencyKey, MaxIdempotencyKeyBytes, lifecycle.OneLine); err != nil {
		return err
	}
	return req.Caller.check()
}

// check refuses a decision whose decided_by or reason breaks its limit.
func (d *Decision) check() error {
	if err := lifecycle.CheckText("decided_by", d.DecidedBy, lifecycle.MaxNameBytes, lifecycle.OneLine); err != nil {
		return err
	}
	if err := lifecycle.CheckText("reason", d.Reason, lifecycle.MaxTextBytes, lifecycle.MultiLine); err != nil {
		return err
	}
	return d.Caller.check()
}

// check refuses an event whose type, id or source breaks its limit.
func (ev *ExternalEvent) check() error {
	if err := lifecycle.CheckText("event_type", ev.Type, lifecycle.MaxNameBytes, lifecycle.OneLine); err != nil {
		return err
	}
	if err := lifecycle.CheckText("event_id", ev.ID, lifecycle.MaxRefBytes, lifecycle.OneLine); err != nil {
		return err
	}
	if err := lifecycle.CheckText("source", ev.Source, lifecycle.MaxRefBytes, lifecycle.OneLine); err != nil {
		return err
	}
	return ev.Caller.check()
}

// check refuses a cancel whose reason is over MaxTextBytes or not clean
// text.
func (req *CancelRequest) check() error {
	if err := lifecycle.CheckText("reason", req.Reason, lifecycle.MaxTextBytes, lifecycle.MultiLine); err != nil {
		return err
	}
	return req.Caller.check()
}
