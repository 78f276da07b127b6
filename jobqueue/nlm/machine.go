package nlm

import (
	"slices"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// State is a state of a job inside the NLM backend (seed 003 §2).
type State string

// States of the NLM-job machine, spelled as in seed 003 §2.
const (
	Accepted        State = "ACCEPTED"
	FetchingContext State = "FETCHING_CONTEXT"
	BuildingPrompt  State = "BUILDING_PROMPT"
	Query           State = "NLM_QUERY"
	Structuring     State = "STRUCTURING"
	Callback        State = "CALLBACK"
	Done            State = "DONE"
	Error           State = "ERROR"
)

// States lists the NLM-job states in pipeline order, ERROR last.
func States() []State {
	return []State{Accepted, FetchingContext, BuildingPrompt, Query, Structuring, Callback, Done, Error}
}

// Job is the NLM backend's own record of a job it processes,
// nlm/jobs/{job_id}.json.
type Job struct {
	JobID      string `json:"job_id"`
	Status     State  `json:"status"`
	ArtifactID string `json:"artifact_id,omitempty"`
	Error      string `json:"error,omitempty"`

	// The request the backend accepted, omitted when empty.
	Request   *Request  `json:"request,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`

	// Lease is held by the processor working on the job (owner, epoch,
	// expiry); it is renewed by heartbeat and every write of the owner is
	// fenced by it. A lease whose Owner is empty was handed back at a
	// processor's shutdown. Nil before the job is picked up and once it ends.
	Lease *storage.Lease `json:"lease,omitempty"`
	// Takeovers counts the times another processor took the job over from
	// a processor that was lost (its lease lapsed).
	Takeovers int `json:"takeovers,omitempty"`
}

// NLM-job events: the pipeline moves and the error edge. Only the
// processor fires them, so they are not exported.
const (
	eventFetchContext     lifecycle.Event = "fetch_context"     // ACCEPTED → FETCHING_CONTEXT
	eventContextFetched   lifecycle.Event = "context_fetched"   // FETCHING_CONTEXT → BUILDING_PROMPT
	eventPromptBuilt      lifecycle.Event = "prompt_built"      // BUILDING_PROMPT → NLM_QUERY
	eventResponseReceived lifecycle.Event = "response_received" // NLM_QUERY → STRUCTURING
	eventStructured       lifecycle.Event = "structured"        // STRUCTURING → CALLBACK
	eventCallbackSent     lifecycle.Event = "callback_sent"     // CALLBACK → DONE
	eventError            lifecycle.Event = "error"             // any non-terminal → ERROR
)

// pipeline is the table of the forward moves, in order.
var pipeline = []struct {
	from, to State
	event    lifecycle.Event
}{
	{Accepted, FetchingContext, eventFetchContext},
	{FetchingContext, BuildingPrompt, eventContextFetched},
	{BuildingPrompt, Query, eventPromptBuilt},
	{Query, Structuring, eventResponseReceived},
	{Structuring, Callback, eventStructured},
	{Callback, Done, eventCallbackSent},
}

// Machine is the NLM backend's pipeline (seed 003 §2): ACCEPTED →
// FETCHING_CONTEXT → BUILDING_PROMPT → NLM_QUERY → STRUCTURING → CALLBACK →
// DONE, and any non-terminal state to ERROR (after which the backend calls
// back with status FAILED). Only the NLM backend moves it.
func Machine() *lifecycle.Machine[State, *Job] { return machine() }

var machine = sync.OnceValue(func() *lifecycle.Machine[State, *Job] {
	nlm := []lifecycle.Actor{lifecycle.ActorNLMBackend}
	var ts []lifecycle.Transition[State, *Job]
	for _, p := range pipeline {
		ts = append(ts,
			lifecycle.Transition[State, *Job]{From: p.from, To: p.to, Event: p.event, Actors: nlm},
			lifecycle.Transition[State, *Job]{From: p.from, To: Error, Event: eventError, Actors: nlm},
		)
	}
	return lifecycle.MustNew(lifecycle.Definition[State, *Job]{
		Name:        "nlm-job",
		Initial:     Accepted,
		States:      States(),
		Terminal:    []State{Done, Error},
		Transitions: ts,
		GetState:    func(j *Job) State { return j.Status },
		SetState:    func(j *Job, s State) { j.Status = s },
	})
})

func terminal(s State) bool { return s == Done || s == Error }

func known(s State) bool { return slices.Contains(States(), s) }
