package lifecycle

import "time"

// InboxState is a state of an inbox entry (docs/spec.md#inbox-entry-lifecycle).
type InboxState string

// States of the inbox entry machine.
const (
	InboxPending   InboxState = "pending"
	InboxProcessed InboxState = "processed"
	InboxRejected  InboxState = "rejected"
	InboxExpired   InboxState = "expired"
)

// InboxSource says where an entry came from (docs/spec.md#inbox-entry).
type InboxSource struct {
	// Type is one of "ui", "telegram", "webhook", "agent", "cron".
	Type string `json:"type"`
	// Identity is e.g. "owner", "guest:zone_abc", "agent:archivist-violin".
	Identity string `json:"identity"`
}

// InboxIntent is what the entry asks for (docs/spec.md#inbox-entry).
type InboxIntent struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// InboxMetadata of an entry (docs/spec.md#inbox-entry).
type InboxMetadata struct {
	CorrelationID string `json:"correlation_id,omitempty"`
	// Priority is "normal" or "high".
	Priority string `json:"priority"`
	// TTLHours is the entry's lifetime while pending; 72 by default.
	TTLHours int `json:"ttl_hours"`
}

// InboxEntry is an inbox entry, inbox/{id}.json (docs/spec.md#inbox-entry).
type InboxEntry struct {
	ID              string        `json:"id"`
	Source          InboxSource   `json:"source"`
	Intent          InboxIntent   `json:"intent"`
	Metadata        InboxMetadata `json:"metadata"`
	Status          InboxState    `json:"status"`
	CreatedAt       time.Time     `json:"created_at"`
	ProposalID      string        `json:"proposal_id,omitempty"`
	RejectionReason string        `json:"rejection_reason,omitempty"`
	// JobID is the job the entry's action started (docs/spec.md#inbox-jobs),
	// set once the job is enqueued; empty for an action that maps to no
	// job type, and on entries written before the field existed.
	JobID string `json:"job_id,omitempty"`
	// TenantID is the entry's tenant (docs/spec.md#tenants): empty for
	// the default tenant, and in every entry written before tenants.
	TenantID string `json:"tenant_id,omitempty"`
}

// Expires tells when e's TTL runs out.
func (e *InboxEntry) Expires() time.Time {
	return e.CreatedAt.Add(time.Duration(e.Metadata.TTLHours) * time.Hour)
}
