package nlm_test

import (
	"math/rand/v2"
	"testing"

	"github.com/runconveyor/conveyor/internal/machinetest"
	"github.com/runconveyor/conveyor/jobqueue/nlm"
)

// Seed 003 §2: the pipeline, and any non-terminal step to ERROR.
var seedNLM = map[nlm.State][]nlm.State{
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
	machinetest.Grid(t, nlm.Machine(), seedNLM)
}

func TestStructure(t *testing.T) {
	t.Parallel()
	machinetest.Structure(t, nlm.Machine().Spec())
}

func newJob(s nlm.State) *nlm.Job   { return &nlm.Job{Status: s} }
func jobState(j *nlm.Job) nlm.State { return j.Status }

func TestRandomWalks(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	reached := map[nlm.State]bool{}
	for range 3000 {
		choices := make([]byte, 2*(1+rng.IntN(30)))
		for i := range choices {
			choices[i] = byte(rng.Uint32())
		}
		for _, s := range machinetest.Walk(t, nlm.Machine(), newJob, jobState, nil, choices) {
			reached[s] = true
		}
	}
	for _, s := range nlm.States() {
		if !reached[s] {
			t.Errorf("walks never reached %s", s)
		}
	}
}

func FuzzWalk(f *testing.F) {
	f.Add([]byte{0, 2, 1, 2, 6, 2})
	f.Fuzz(func(t *testing.T, choices []byte) {
		machinetest.Walk(t, nlm.Machine(), newJob, jobState, nil, choices)
	})
}
