package lifecycle

import (
	"strings"
	"time"
)

// Approval is the approval a run waits for or got (docs/spec.md#run-status): a run's
// status.json keeps it while the run waits at its gate and after.
type Approval struct {
	Action      string    `json:"action"`
	RequestedAt time.Time `json:"requested_at"`
	// RequestedBy is on whose behalf the gate was asked for: the run's
	// submitting user, else the agent (agent:{slug}).
	RequestedBy string     `json:"requested_by,omitempty"`
	Decision    string     `json:"decision,omitempty"` // "approved" or "rejected"
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
	DecidedBy   string     `json:"decided_by,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	// AfterStep is the step after which the run parked at this gate: the
	// steps after it are handed the decision. 0 in a record written before
	// it was kept (its decision reaches no step, as then).
	AfterStep int `json:"after_step,omitempty"`
	// PayloadSHA256 names the decision's JSON payload, kept beside the run
	// (docs/spec.md#wait-data), and PayloadBytes is its size; empty and 0
	// when the decision carried none.
	PayloadSHA256 string `json:"payload_sha256,omitempty"`
	PayloadBytes  int    `json:"payload_bytes,omitempty"`
}

// ExternalWait is the external event a run waits for (docs/spec.md#run-status).
type ExternalWait struct {
	EventType string     `json:"event_type"`
	Since     time.Time  `json:"since"`
	Deadline  *time.Time `json:"deadline,omitempty"`
	// Filled when the event arrives.
	EventID    string     `json:"event_id,omitempty"`
	Source     string     `json:"source,omitempty"`
	ReceivedAt *time.Time `json:"received_at,omitempty"`
	// AfterStep, PayloadSHA256 and PayloadBytes are an [Approval]'s: the
	// step after which the run waited, and the event's payload.
	AfterStep     int    `json:"after_step,omitempty"`
	PayloadSHA256 string `json:"payload_sha256,omitempty"`
	PayloadBytes  int    `json:"payload_bytes,omitempty"`
}

// Initiator says what caused a transition (docs/spec.md#transition-context).
type Initiator string

// The initiators (docs/spec.md#transition-context).
const (
	InitiatorUser     Initiator = "user"     // a person, through the API
	InitiatorSystem   Initiator = "system"   // the orchestration layer on its own
	InitiatorTimeout  Initiator = "timeout"  // a deadline passed
	InitiatorPolicy   Initiator = "policy"   // a rule of the deployment
	InitiatorWebhook  Initiator = "webhook"  // an external event arrived
	InitiatorApproval Initiator = "approval" // an approval gate was answered
)

// TransitionContext is the audit context of one transition (docs/spec.md#transition-context):
// which run, who asked and why, when, and the approval or external event
// the move is about. A refused move reports it
// ([InvalidTransitionError].Context, [ForbiddenActorError].Context), and
// the run package writes it into the audit event and the run_transition
// log line of every status write.
type TransitionContext struct {
	RunID     string    `json:"run_id,omitempty"`
	UserID    string    `json:"user_id,omitempty"`
	Initiator Initiator `json:"initiator,omitempty"`
	Timestamp time.Time `json:"timestamp,omitzero"`
	// Metadata is the caller's, kept as given; strings, so every value is
	// checked text.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Approval is set on moves into, at and out of an approval gate.
	Approval *Approval `json:"approval,omitempty"`
	// External is set on moves into and out of an external wait.
	External *ExternalWait `json:"external_event,omitempty"`
}

// summary is a short form for error messages: run, user, initiator and
// time, never the metadata (which may be large).
func (tc *TransitionContext) summary() string {
	var parts []string
	if tc.RunID != "" {
		parts = append(parts, "run "+tc.RunID)
	}
	if tc.UserID != "" {
		parts = append(parts, "user "+tc.UserID)
	}
	if tc.Initiator != "" {
		parts = append(parts, "initiator "+string(tc.Initiator))
	}
	if !tc.Timestamp.IsZero() {
		parts = append(parts, "at "+tc.Timestamp.UTC().Format(time.RFC3339Nano))
	}
	return strings.Join(parts, ", ")
}
