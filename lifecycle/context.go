package lifecycle

import "time"

// Approval is the approval a run waits for or got (seed 004 §2.2): a run's
// status.json keeps it while the run waits at its gate and after.
type Approval struct {
	Action      string     `json:"action"`
	RequestedAt time.Time  `json:"requested_at"`
	Decision    string     `json:"decision,omitempty"` // "approved" or "rejected"
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
	DecidedBy   string     `json:"decided_by,omitempty"`
	Reason      string     `json:"reason,omitempty"`
}

// ExternalWait is the external event a run waits for (seed 004 §2.2).
type ExternalWait struct {
	EventType string     `json:"event_type"`
	Since     time.Time  `json:"since"`
	Deadline  *time.Time `json:"deadline,omitempty"`
	// Filled when the event arrives.
	EventID    string     `json:"event_id,omitempty"`
	Source     string     `json:"source,omitempty"`
	ReceivedAt *time.Time `json:"received_at,omitempty"`
}
