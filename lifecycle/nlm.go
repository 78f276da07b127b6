package lifecycle

import "time"

// NLMState is a state of a job inside the NLM backend (docs/spec.md#nlm-job-lifecycle).
type NLMState string

// States of the NLM-job machine, spelled as the platform spells them.
const (
	NLMAccepted        NLMState = "ACCEPTED"
	NLMFetchingContext NLMState = "FETCHING_CONTEXT"
	NLMBuildingPrompt  NLMState = "BUILDING_PROMPT"
	NLMQuery           NLMState = "NLM_QUERY"
	NLMStructuring     NLMState = "STRUCTURING"
	NLMCallback        NLMState = "CALLBACK"
	NLMDone            NLMState = "DONE"
	NLMError           NLMState = "ERROR"
)

// NLMJob is the NLM backend's own record of a job it processes,
// nlm/jobs/{job_id}.json.
type NLMJob struct {
	JobID      string   `json:"job_id"`
	Status     NLMState `json:"status"`
	ArtifactID string   `json:"artifact_id,omitempty"`
	Error      string   `json:"error,omitempty"`

	// The request the backend accepted, omitted when empty.
	Request   *NLMRequest `json:"request,omitempty"`
	CreatedAt time.Time   `json:"created_at,omitzero"`
	UpdatedAt time.Time   `json:"updated_at,omitzero"`

	// Lease is held by the processor working on the job (owner, epoch,
	// expiry); it is renewed by heartbeat and every write of the owner is
	// fenced by it. A lease whose Owner is empty was handed back at a
	// processor's shutdown. Nil before the job is picked up and once it ends.
	Lease *Lease `json:"lease,omitempty"`
	// Takeovers counts the times another processor took the job over from
	// a processor that was lost (its lease lapsed).
	Takeovers int `json:"takeovers,omitempty"`
}

// NLMRequest is what the orchestration layer posts to the NLM backend
// (POST /jobs/process, docs/spec.md#nlm-request-and-callback).
type NLMRequest struct {
	JobID     string  `json:"job_id"`
	RunID     string  `json:"run_id,omitempty"`
	JobType   JobType `json:"job_type"`
	AgentSlug string  `json:"agent_slug"`
	// ContextSnapshotURL is where FETCHING_CONTEXT loads the context from.
	ContextSnapshotURL string `json:"context_snapshot_url,omitempty"`
	// Query is what to ask NotebookLM: at most 1 MiB
	// of UTF-8 text. The URLs are at most 4,096 bytes.
	Query string `json:"query,omitempty"`
	// Callback is the URL the result is posted to (http or https).
	Callback string `json:"callback"`
	// ProjectID is the artifact's cid; empty means Config.Project.
	ProjectID string `json:"project_id,omitempty"`
}

// NLMCallbackBody is the body posted to the callback URL: status "COMPLETE"
// with the artifact id, or "FAILED" with the error (docs/spec.md#nlm-request-and-callback).
type NLMCallbackBody struct {
	JobID      string `json:"job_id"`
	Status     string `json:"status"`
	ArtifactID string `json:"artifact_id,omitempty"`
	Error      string `json:"error,omitempty"`
}
