package lifecycle

// The checks of the Runner's caller inputs (issue 10 F). Each public method
// that takes free text runs its check first, so a refused call writes
// nothing; the limits are those of input.go.

// check refuses a submit whose text fields break their limits. The
// values' meaning (a known agent, a trigger of the set, JSON input, a key
// of a scheme) is Submit's check, after this one.
func (req *SubmitRequest) check() error {
	if err := CheckText("agent_slug", req.AgentSlug, MaxNameBytes, OneLine); err != nil {
		return err
	}
	if err := CheckText("trigger", req.Trigger, MaxNameBytes, OneLine); err != nil {
		return err
	}
	if err := CheckBytes("input", req.Input, MaxDocumentBytes); err != nil {
		return err
	}
	return CheckText("idempotency_key", req.IdempotencyKey, MaxIdempotencyKeyBytes, OneLine)
}

// check refuses a decision whose decided_by or reason breaks its limit.
func (d *Decision) check() error {
	if err := CheckText("decided_by", d.DecidedBy, MaxNameBytes, OneLine); err != nil {
		return err
	}
	return CheckText("reason", d.Reason, MaxTextBytes, MultiLine)
}

// check refuses an event whose type, id or source breaks its limit.
func (ev *ExternalEvent) check() error {
	if err := CheckText("event_type", ev.Type, MaxNameBytes, OneLine); err != nil {
		return err
	}
	if err := CheckText("event_id", ev.ID, MaxRefBytes, OneLine); err != nil {
		return err
	}
	return CheckText("source", ev.Source, MaxRefBytes, OneLine)
}

// checkReason refuses a cancel reason over MaxTextBytes or not clean text.
func checkReason(reason string) error {
	return CheckText("reason", reason, MaxTextBytes, MultiLine)
}
