package machine

import (
	"sync"

	"github.com/runconveyor/conveyor/lifecycle"
)

// NLMStates lists the NLM-job states in pipeline order, ERROR last.
func NLMStates() []lifecycle.NLMState {
	return []lifecycle.NLMState{lifecycle.NLMAccepted, lifecycle.NLMFetchingContext, lifecycle.NLMBuildingPrompt, lifecycle.NLMQuery, lifecycle.NLMStructuring, lifecycle.NLMCallback, lifecycle.NLMDone, lifecycle.NLMError}
}

// NLM-job events: the pipeline moves and the error edge. Only the
// processor fires them, so they are not exported.
const (
	EventNLMFetchContext     lifecycle.Event = "fetch_context"     // ACCEPTED → FETCHING_CONTEXT
	EventNLMContextFetched   lifecycle.Event = "context_fetched"   // FETCHING_CONTEXT → BUILDING_PROMPT
	EventNLMPromptBuilt      lifecycle.Event = "prompt_built"      // BUILDING_PROMPT → NLM_QUERY
	EventNLMResponseReceived lifecycle.Event = "response_received" // NLM_QUERY → STRUCTURING
	EventNLMStructured       lifecycle.Event = "structured"        // STRUCTURING → CALLBACK
	EventNLMCallbackSent     lifecycle.Event = "callback_sent"     // CALLBACK → DONE
	EventNLMError            lifecycle.Event = "error"             // any non-terminal → ERROR
)

// nlmPipeline is the table of the forward moves, in order.
var nlmPipeline = []struct {
	from, to lifecycle.NLMState
	event    lifecycle.Event
}{
	{lifecycle.NLMAccepted, lifecycle.NLMFetchingContext, EventNLMFetchContext},
	{lifecycle.NLMFetchingContext, lifecycle.NLMBuildingPrompt, EventNLMContextFetched},
	{lifecycle.NLMBuildingPrompt, lifecycle.NLMQuery, EventNLMPromptBuilt},
	{lifecycle.NLMQuery, lifecycle.NLMStructuring, EventNLMResponseReceived},
	{lifecycle.NLMStructuring, lifecycle.NLMCallback, EventNLMStructured},
	{lifecycle.NLMCallback, lifecycle.NLMDone, EventNLMCallbackSent},
}

// NLMMachine is the NLM backend's pipeline (docs/spec.md#nlm-job-lifecycle): ACCEPTED →
// FETCHING_CONTEXT → BUILDING_PROMPT → NLM_QUERY → STRUCTURING → CALLBACK →
// DONE, and any non-terminal state to ERROR (after which the backend calls
// back with status FAILED). Only the NLM backend moves it.
func NLMMachine() *Machine[lifecycle.NLMState, *lifecycle.NLMJob] { return nlmMachine() }

var nlmMachine = sync.OnceValue(func() *Machine[lifecycle.NLMState, *lifecycle.NLMJob] {
	nlm := []lifecycle.Actor{lifecycle.ActorNLMBackend}
	var ts []Transition[lifecycle.NLMState, *lifecycle.NLMJob]
	for _, p := range nlmPipeline {
		ts = append(ts,
			Transition[lifecycle.NLMState, *lifecycle.NLMJob]{From: p.from, To: p.to, Event: p.event, Actors: nlm},
			Transition[lifecycle.NLMState, *lifecycle.NLMJob]{From: p.from, To: lifecycle.NLMError, Event: EventNLMError, Actors: nlm},
		)
	}
	return MustNew(Definition[lifecycle.NLMState, *lifecycle.NLMJob]{
		Name:        "nlm-job",
		Initial:     lifecycle.NLMAccepted,
		States:      NLMStates(),
		Terminal:    []lifecycle.NLMState{lifecycle.NLMDone, lifecycle.NLMError},
		Transitions: ts,
		GetState:    func(j *lifecycle.NLMJob) lifecycle.NLMState { return j.Status },
		SetState:    func(j *lifecycle.NLMJob, s lifecycle.NLMState) { j.Status = s },
	})
})
