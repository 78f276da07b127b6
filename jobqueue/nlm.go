package jobqueue

import (
	"sync"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

// NLMJobState is a state of a job inside the NLM backend (seed 003 §2).
type NLMJobState string

// States of the NLM-job machine, spelled as in seed 003 §2.
const (
	NLMAccepted        NLMJobState = "ACCEPTED"
	NLMFetchingContext NLMJobState = "FETCHING_CONTEXT"
	NLMBuildingPrompt  NLMJobState = "BUILDING_PROMPT"
	NLMQuery           NLMJobState = "NLM_QUERY"
	NLMStructuring     NLMJobState = "STRUCTURING"
	NLMCallback        NLMJobState = "CALLBACK"
	NLMDone            NLMJobState = "DONE"
	NLMError           NLMJobState = "ERROR"
)

// NLMJobStates lists the NLM-job states in pipeline order, ERROR last.
func NLMJobStates() []NLMJobState {
	return []NLMJobState{NLMAccepted, NLMFetchingContext, NLMBuildingPrompt, NLMQuery, NLMStructuring,
		NLMCallback, NLMDone, NLMError}
}

// NLMJob is the NLM backend's own record of a job it processes.
type NLMJob struct {
	JobID      string      `json:"job_id"`
	Status     NLMJobState `json:"status"`
	ArtifactID string      `json:"artifact_id,omitempty"`
	Error      string      `json:"error,omitempty"`

	// The request the backend accepted (NLMProcessor), omitted when empty.
	Request   *NLMRequest `json:"request,omitempty"`
	CreatedAt time.Time   `json:"created_at,omitzero"`
	UpdatedAt time.Time   `json:"updated_at,omitzero"`
}

// NLM-job events.
const (
	EventFetchContext     lifecycle.Event = "fetch_context"     // ACCEPTED → FETCHING_CONTEXT
	EventContextFetched   lifecycle.Event = "context_fetched"   // FETCHING_CONTEXT → BUILDING_PROMPT
	EventPromptBuilt      lifecycle.Event = "prompt_built"      // BUILDING_PROMPT → NLM_QUERY
	EventResponseReceived lifecycle.Event = "response_received" // NLM_QUERY → STRUCTURING
	EventStructured       lifecycle.Event = "structured"        // STRUCTURING → CALLBACK
	EventCallbackSent     lifecycle.Event = "callback_sent"     // CALLBACK → DONE
	EventError            lifecycle.Event = "error"             // any non-terminal → ERROR
)

// NLMJobMachine is the NLM backend's pipeline (seed 003 §2): ACCEPTED →
// FETCHING_CONTEXT → BUILDING_PROMPT → NLM_QUERY → STRUCTURING → CALLBACK →
// DONE, and any step to ERROR (after which the backend calls back with status
// FAILED). Only the NLM backend moves it.
func NLMJobMachine() *lifecycle.Machine[NLMJobState, *NLMJob] { return nlmJobMachine() }

var nlmJobMachine = sync.OnceValue(func() *lifecycle.Machine[NLMJobState, *NLMJob] {
	nlm := []lifecycle.Actor{lifecycle.ActorNLMBackend}
	pipeline := []struct {
		from, to NLMJobState
		event    lifecycle.Event
	}{
		{NLMAccepted, NLMFetchingContext, EventFetchContext},
		{NLMFetchingContext, NLMBuildingPrompt, EventContextFetched},
		{NLMBuildingPrompt, NLMQuery, EventPromptBuilt},
		{NLMQuery, NLMStructuring, EventResponseReceived},
		{NLMStructuring, NLMCallback, EventStructured},
		{NLMCallback, NLMDone, EventCallbackSent},
	}
	var ts []lifecycle.Transition[NLMJobState, *NLMJob]
	for _, p := range pipeline {
		ts = append(ts,
			lifecycle.Transition[NLMJobState, *NLMJob]{From: p.from, To: p.to, Event: p.event, Actors: nlm},
			lifecycle.Transition[NLMJobState, *NLMJob]{From: p.from, To: NLMError, Event: EventError, Actors: nlm},
		)
	}
	return lifecycle.MustNew(lifecycle.Definition[NLMJobState, *NLMJob]{
		Name:        "nlm-job",
		Initial:     NLMAccepted,
		States:      NLMJobStates(),
		Terminal:    []NLMJobState{NLMDone, NLMError},
		Transitions: ts,
		GetState:    func(j *NLMJob) NLMJobState { return j.Status },
		SetState:    func(j *NLMJob, s NLMJobState) { j.Status = s },
	})
})
