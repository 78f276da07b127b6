package machine_test

import (
	"math/rand/v2"
	"testing"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/testkit/machinetest"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The spec's tables (docs/spec.md#lifecycles), transcribed by hand and
// independently of runs.go.

// The canonical run, plus its two extensions (docs/spec.md#extensions)
// requested → failed and queued → failed.
var specCanonical = map[machine.RunState][]machine.RunState{
	"requested": {"queued", "failed"},
	"queued":    {"running", "failed"},
	"running":   {"running", "completed", "failed"},
	"completed": {},
	"failed":    {},
}

// The cancel-aware run (docs/spec.md#cancel-aware-run).
var specCancelable = map[machine.CancelableRunState][]machine.CancelableRunState{
	"queued":           {"running", "canceled"},
	"running":          {"succeeded", "failed", "timeout", "cancel_requested", "compensating"},
	"cancel_requested": {"canceled", "succeeded", "failed", "compensating"},
	"compensating":     {"canceled", "failed"}, // extension: compensation
	"succeeded":        {},
	"failed":           {},
	"canceled":         {},
	"timeout":          {},
}

// The approval run (docs/spec.md#approval-run).
var specApproval = map[machine.ApprovalRunState][]machine.ApprovalRunState{
	"pending":           {"running", "cancelled", "failed"},
	"running":           {"completed", "failed", "cancelled", "awaiting_approval", "waiting_external", "compensating"},
	"awaiting_approval": {"running", "completed", "failed", "cancelled", "compensating"},
	"waiting_external":  {"running", "completed", "failed", "cancelled", "compensating"},
	"compensating":      {"cancelled", "failed"}, // extension: compensation
	"completed":         {},
	"failed":            {},
	"cancelled":         {},
}

// The run step: the moves are Conveyor's (docs/spec.md#run-step).
var specStep = map[lifecycle.StepState][]lifecycle.StepState{
	"pending":   {"running", "skipped"},
	"running":   {"completed", "failed"},
	"completed": {},
	"failed":    {},
	"skipped":   {},
}

func TestCanonicalRunGrid(t *testing.T) {
	t.Parallel()
	machinetest.Grid(t, machine.CanonicalRun(), specCanonical)
}

func TestCancelableRunGrid(t *testing.T) {
	t.Parallel()
	machinetest.Grid(t, machine.CancelableRun(), specCancelable)
}

func TestApprovalRunGrid(t *testing.T) {
	t.Parallel()
	machinetest.Grid(t, machine.ApprovalRun(), specApproval)
}

func TestRunStepGrid(t *testing.T) {
	t.Parallel()
	machinetest.Grid(t, machine.RunStep(), specStep)
}

func TestRunMachinesStructure(t *testing.T) {
	t.Parallel()
	for _, s := range []lifecycle.Spec{machine.CanonicalRun().Spec(), machine.CancelableRun().Spec(), machine.ApprovalRun().Spec(), machine.RunStep().Spec()} {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			machinetest.Structure(t, s)
		})
	}
}

func TestRunMachineNamesAndTerminals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec     lifecycle.Spec
		name     string
		initial  string
		terminal []string
	}{
		{machine.CanonicalRun().Spec(), "canonical-run", "requested", []string{"completed", "failed"}},
		{machine.CancelableRun().Spec(), "cancelable-run", "queued", []string{"succeeded", "failed", "canceled", "timeout"}},
		{machine.ApprovalRun().Spec(), "approval-run", "pending", []string{"completed", "failed", "cancelled"}},
		{machine.RunStep().Spec(), "run-step", "pending", []string{"completed", "failed", "skipped"}},
	}
	for _, tt := range tests {
		if tt.spec.Name != tt.name || tt.spec.Initial != tt.initial {
			t.Errorf("got %s/%s, want %s/%s", tt.spec.Name, tt.spec.Initial, tt.name, tt.initial)
		}
		if len(tt.spec.Terminal) != len(tt.terminal) {
			t.Errorf("%s: terminal %v, want %v", tt.name, tt.spec.Terminal, tt.terminal)
		}
		for i := range tt.terminal {
			if tt.spec.Terminal[i] != tt.terminal[i] {
				t.Errorf("%s: terminal %v, want %v", tt.name, tt.spec.Terminal, tt.terminal)
			}
		}
	}
}

func TestExtensionsAreMarked(t *testing.T) {
	t.Parallel()
	m := machine.CanonicalRun()
	for _, tr := range m.Transitions() {
		wantExt := tr.To == machine.RunFailed && tr.From != machine.RunRunning
		if tr.Extension != wantExt {
			t.Errorf("%s → %s: Extension = %v, want %v", tr.From, tr.To, tr.Extension, wantExt)
		}
	}
	for _, m := range []interface{ Spec() lifecycle.Spec }{machine.CancelableRun(), machine.ApprovalRun(), machine.RunStep()} {
		for _, tr := range m.Spec().Transitions {
			// The compensating state is Conveyor's (compensation, issue 31):
			// every move into or out of it, and only those, is an extension.
			comp := tr.From == "compensating" || tr.To == "compensating"
			if tr.Extension != comp {
				t.Errorf("%s: %s → %s: Extension = %v, want %v", m.Spec().Name, tr.From, tr.To, tr.Extension, comp)
			}
		}
	}
}

func newRun[S ~string](s S) *lifecycle.RunStatus { return &record{Status: string(s)} }

// TestRandomWalks fires thousands of random event sequences at every run
// machine; Walk fails the test the moment one leaves the table.
func TestRandomWalks(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	reached := map[string]map[string]bool{}
	mark := func(name string, s string) {
		if reached[name] == nil {
			reached[name] = map[string]bool{}
		}
		reached[name][s] = true
	}
	for range 2000 {
		choices := make([]byte, 2*(1+rng.IntN(12)))
		for i := range choices {
			choices[i] = byte(rng.Uint32())
		}
		for _, s := range machinetest.Walk(t, machine.CanonicalRun(), newRun, getState[machine.RunState], nil, choices) {
			mark("canonical-run", string(s))
		}
		for _, s := range machinetest.Walk(t, machine.CancelableRun(), newRun, getState[machine.CancelableRunState], nil, choices) {
			mark("cancelable-run", string(s))
		}
		for _, s := range machinetest.Walk(t, machine.ApprovalRun(), newRun, getState[machine.ApprovalRunState], nil, choices) {
			mark("approval-run", string(s))
		}
		for _, s := range machinetest.Walk(t, machine.RunStep(), newStep, stepState, nil, choices) {
			mark("run-step", string(s))
		}
	}
	// The walks must be able to fail: they have to reach every state.
	for _, s := range []lifecycle.Spec{machine.CanonicalRun().Spec(), machine.CancelableRun().Spec(), machine.ApprovalRun().Spec(), machine.RunStep().Spec()} {
		for _, st := range s.States {
			if !reached[s.Name][st] {
				t.Errorf("%s: random walks never reached %q", s.Name, st)
			}
		}
	}
}

func getState[S ~string](r *lifecycle.RunStatus) S { return S(r.Status) }

func newStep(s lifecycle.StepState) *lifecycle.StepRecord { return &lifecycle.StepRecord{Status: s} }

func stepState(r *lifecycle.StepRecord) lifecycle.StepState { return r.Status }

func FuzzCancelableRunWalk(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte{5, 1, 6, 1, 6, 1})
	f.Fuzz(func(t *testing.T, choices []byte) {
		machinetest.Walk(t, machine.CancelableRun(), newRun, getState[machine.CancelableRunState], nil, choices)
	})
}

func FuzzApprovalRunWalk(f *testing.F) {
	f.Add([]byte{0, 1, 3, 1, 4, 0})
	f.Fuzz(func(t *testing.T, choices []byte) {
		machinetest.Walk(t, machine.ApprovalRun(), newRun, getState[machine.ApprovalRunState], nil, choices)
	})
}

func FuzzCanonicalRunWalk(f *testing.F) {
	f.Add([]byte{0, 1, 1, 1, 2, 1})
	f.Fuzz(func(t *testing.T, choices []byte) {
		machinetest.Walk(t, machine.CanonicalRun(), newRun, getState[machine.RunState], nil, choices)
	})
}

// TestRunFinishedAgreesWithTheMachines: lifecycle.RunFinished, which the
// Go client uses without the machines, names the same terminal states as
// the run machines' tables, state by state.
func TestRunFinishedAgreesWithTheMachines(t *testing.T) {
	t.Parallel()
	check := func(name string, states []string, terminal func(string) bool) {
		for _, s := range append(states, "no-such-state") {
			if got, want := lifecycle.RunFinished(name, s), terminal(s); got != want {
				t.Errorf("RunFinished(%q, %q) = %v, the machine says %v", name, s, got, want)
			}
		}
	}
	c, k, a := machine.CanonicalRun(), machine.CancelableRun(), machine.ApprovalRun()
	check("", c.Spec().States, func(s string) bool { return c.IsTerminal(machine.RunState(s)) })
	check(lifecycle.MachineCanonical, c.Spec().States, func(s string) bool { return c.IsTerminal(machine.RunState(s)) })
	check(lifecycle.MachineCancelable, k.Spec().States, func(s string) bool { return k.IsTerminal(machine.CancelableRunState(s)) })
	check(lifecycle.MachineApproval, a.Spec().States, func(s string) bool { return a.IsTerminal(machine.ApprovalRunState(s)) })
	if lifecycle.RunFinished("no-such-machine", "completed") {
		t.Error("an unknown machine's run counts as finished")
	}
}
