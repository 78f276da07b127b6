package nlm_test

import (
	"math/rand/v2"
	"testing"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/testkit/machinetest"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The NLM job (docs/spec.md#nlm-job-lifecycle): the pipeline, and any
// non-terminal step to ERROR, transcribed by hand.
var specNLM = map[lifecycle.NLMState][]lifecycle.NLMState{
	"ACCEPTED":         {"FETCHING_CONTEXT", "ERROR"},
	"FETCHING_CONTEXT": {"BUILDING_PROMPT", "ERROR"},
	"BUILDING_PROMPT":  {"NLM_QUERY", "ERROR"},
	"NLM_QUERY":        {"STRUCTURING", "ERROR"},
	"STRUCTURING":      {"CALLBACK", "ERROR"},
	"CALLBACK":         {"DONE", "ERROR"},
	"DONE":             {},
	"ERROR":            {},
}

func TestGrid(t *testing.T) {
	t.Parallel()
	machinetest.Grid(t, machine.NLMMachine(), specNLM)
}

func TestStructure(t *testing.T) {
	t.Parallel()
	machinetest.Structure(t, machine.NLMMachine().Spec())
}

func newJob(s lifecycle.NLMState) *lifecycle.NLMJob   { return &lifecycle.NLMJob{Status: s} }
func jobState(j *lifecycle.NLMJob) lifecycle.NLMState { return j.Status }

func TestRandomWalks(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	reached := map[lifecycle.NLMState]bool{}
	for range 3000 {
		choices := make([]byte, 2*(1+rng.IntN(30)))
		for i := range choices {
			choices[i] = byte(rng.Uint32())
		}
		for _, s := range machinetest.Walk(t, machine.NLMMachine(), newJob, jobState, nil, choices) {
			reached[s] = true
		}
	}
	for _, s := range machine.NLMStates() {
		if !reached[s] {
			t.Errorf("walks never reached %s", s)
		}
	}
}

func FuzzWalk(f *testing.F) {
	f.Add([]byte{0, 2, 1, 2, 6, 2})
	f.Fuzz(func(t *testing.T, choices []byte) {
		machinetest.Walk(t, machine.NLMMachine(), newJob, jobState, nil, choices)
	})
}
