package lifecycle

import (
	"encoding/json"
	"time"
)

// ArtifactType is an artifact's content type (docs/spec.md#artifact): one
// of the built-in RESEARCH_BRIEF, BRIEF, PREPROCESSED_PROPOSAL, or a user
// job type's own.
type ArtifactType string

// Artifact is an artifact record, projects/{cid}/artifacts/{artifact_id}.json
// (docs/spec.md#artifact). The embedded Meta is its "version" (1 on
// create; a finalized artifact is never rewritten: only a lost attempt's
// artifact, which no job points at, is replaced by the next attempt's, with
// the version counted on).
type Artifact struct {
	Meta

	ArtifactID  string          `json:"artifact_id"`
	JobID       string          `json:"job_id"`
	RunID       string          `json:"run_id,omitempty"`
	Type        ArtifactType    `json:"type"`
	AgentSlug   string          `json:"agent_slug"`
	CreatedAt   time.Time       `json:"created_at"`
	Finalized   bool            `json:"finalized"`
	FinalizedAt *time.Time      `json:"finalized_at,omitempty"`
	URL         string          `json:"url,omitempty"`
	EntityRefs  []string        `json:"entity_refs,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Content     json.RawMessage `json:"content"`
	Sources     []SourceRef     `json:"sources,omitempty"`
	// ProjectID is the cid of the key; Conveyor adds it so a record read on
	// its own says where it lives.
	ProjectID string `json:"project_id,omitempty"`
	// TenantID is the tenant of the job that wrote it (docs/spec.md#tenants);
	// empty for the default tenant.
	TenantID string `json:"tenant_id,omitempty"`
	// Epoch is the fencing epoch of the claim that wrote it;
	// Conveyor adds it, omitted for artifacts written unfenced.
	Epoch int64 `json:"epoch,omitempty"`
}
