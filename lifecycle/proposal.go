package lifecycle

import "time"

// ProposalState is a state of a proposal (docs/spec.md#proposal): pending
// until the gateway applies or rejects it.
type ProposalState string

// The proposal states.
const (
	ProposalPending  ProposalState = "pending"
	ProposalApplied  ProposalState = "applied"
	ProposalRejected ProposalState = "rejected"
)

// Proposal is an edit a run proposed, proposals/{id}.json
// (docs/spec.md#proposal): who proposed it, where its content is, and
// whether the gateway has applied or rejected it.
type Proposal struct {
	// SchemaVersion is the record's layout (1); a release that adds
	// fields keeps it and a reader of an older release ignores them.
	SchemaVersion int    `json:"schema_version"`
	ID            string `json:"id"`
	RunID         string `json:"run_id"`
	AgentSlug     string `json:"agent_slug"`
	// Step is the name of the step that created it.
	Step      string        `json:"step,omitempty"`
	Status    ProposalState `json:"status"`
	CreatedAt time.Time     `json:"created_at"`
	// ContentKey is the store key of its content: one of its run's output
	// files (agents/{slug}/runs/{runId}/output/{name}).
	ContentKey string `json:"content_key"`
	// DecidedAt, DecidedBy and Reason are set when it is applied or
	// rejected; Reason is optional.
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	DecidedBy Actor      `json:"decided_by,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	// TenantID is its run's tenant (docs/spec.md#tenants); empty for the
	// default tenant.
	TenantID string `json:"tenant_id,omitempty"`
}
