package lifecycle

import (
	"sync"
	"time"

	"github.com/runconveyor/conveyor/storage/records"
)

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

// NLMStates lists the NLM-job states in pipeline order, ERROR last.
func NLMStates() []NLMState {
	return []NLMState{NLMAccepted, NLMFetchingContext, NLMBuildingPrompt, NLMQuery, NLMStructuring, NLMCallback, NLMDone, NLMError}
}

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
	Lease *records.Lease `json:"lease,omitempty"`
	// Takeovers counts the times another processor took the job over from
	// a processor that was lost (its lease lapsed).
	Takeovers int `json:"takeovers,omitempty"`
}

// NLM-job events: the pipeline moves and the error edge. Only the
// processor fires them, so they are not exported.
const (
	EventNLMFetchContext     Event = "fetch_context"     // ACCEPTED → FETCHING_CONTEXT
	EventNLMContextFetched   Event = "context_fetched"   // FETCHING_CONTEXT → BUILDING_PROMPT
	EventNLMPromptBuilt      Event = "prompt_built"      // BUILDING_PROMPT → NLM_QUERY
	EventNLMResponseReceived Event = "response_received" // NLM_QUERY → STRUCTURING
	EventNLMStructured       Event = "structured"        // STRUCTURING → CALLBACK
	EventNLMCallbackSent     Event = "callback_sent"     // CALLBACK → DONE
	EventNLMError            Event = "error"             // any non-terminal → ERROR
)

// nlmPipeline is the table of the forward moves, in order.
var nlmPipeline = []struct {
	from, to NLMState
	event    Event
}{
	{NLMAccepted, NLMFetchingContext, EventNLMFetchContext},
	{NLMFetchingContext, NLMBuildingPrompt, EventNLMContextFetched},
	{NLMBuildingPrompt, NLMQuery, EventNLMPromptBuilt},
	{NLMQuery, NLMStructuring, EventNLMResponseReceived},
	{NLMStructuring, NLMCallback, EventNLMStructured},
	{NLMCallback, NLMDone, EventNLMCallbackSent},
}

// NLMMachine is the NLM backend's pipeline (docs/spec.md#nlm-job-lifecycle): ACCEPTED →
// FETCHING_CONTEXT → BUILDING_PROMPT → NLM_QUERY → STRUCTURING → CALLBACK →
// DONE, and any non-terminal state to ERROR (after which the backend calls
// back with status FAILED). Only the NLM backend moves it.
func NLMMachine() *Machine[NLMState, *NLMJob] { return nlmMachine() }

var nlmMachine = sync.OnceValue(func() *Machine[NLMState, *NLMJob] {
	nlm := []Actor{ActorNLMBackend}
	var ts []Transition[NLMState, *NLMJob]
	for _, p := range nlmPipeline {
		ts = append(ts,
			Transition[NLMState, *NLMJob]{From: p.from, To: p.to, Event: p.event, Actors: nlm},
			Transition[NLMState, *NLMJob]{From: p.from, To: NLMError, Event: EventNLMError, Actors: nlm},
		)
	}
	return MustNew(Definition[NLMState, *NLMJob]{
		Name:        "nlm-job",
		Initial:     NLMAccepted,
		States:      NLMStates(),
		Terminal:    []NLMState{NLMDone, NLMError},
		Transitions: ts,
		GetState:    func(j *NLMJob) NLMState { return j.Status },
		SetState:    func(j *NLMJob, s NLMState) { j.Status = s },
	})
})

// NLMRequest is what the orchestration layer posts to the NLM backend
// (POST /jobs/process, docs/spec.md#nlm-request-and-callback).
type NLMRequest struct {
	JobID     string  `json:"job_id"`
	RunID     string  `json:"run_id,omitempty"`
	JobType   JobType `json:"job_type"`
	AgentSlug string  `json:"agent_slug"`
	// ContextSnapshotURL is where FETCHING_CONTEXT loads the context from.
	ContextSnapshotURL string `json:"context_snapshot_url,omitempty"`
	// Query is what to ask NotebookLM: at most codes.MaxDocumentBytes
	// of UTF-8 text. The URLs are at most codes.MaxURLBytes.
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
