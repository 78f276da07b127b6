package run_test

import (
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

func TestAgentsListsTheEffectiveConfig(t *testing.T) {
	t.Parallel()
	r, err := run.NewRunner(run.Config{Store: memstore.New(), Concurrency: 2},
		run.Agent{Slug: "zeta", Machine: lifecycle.MachineApproval, Steps: []run.Step{okStep("a")}, Concurrency: 5},
		run.Agent{Slug: "alpha", Steps: []run.Step{okStep("load"), okStep("write")}},
	)
	if err != nil {
		t.Fatal(err)
	}
	got := r.Agents()
	if len(got) != 2 || got[0].Slug != "alpha" || got[1].Slug != "zeta" {
		t.Fatalf("Agents() = %+v, want alpha then zeta", got)
	}
	if got[0].Machine != lifecycle.MachineCanonical || got[0].Concurrency != 2 || len(got[0].Steps) != 2 {
		t.Errorf("alpha = %+v, want the canonical machine, concurrency 2 (the config's), 2 steps", got[0])
	}
	if got[1].Machine != lifecycle.MachineApproval || got[1].Concurrency != 5 {
		t.Errorf("zeta = %+v, want the approval machine, concurrency 5", got[1])
	}
	// The result is a copy: changing it changes nothing in the runner.
	got[0].Steps[0].Name = "changed"
	if r.Agents()[0].Steps[0].Name != "load" {
		t.Error("Agents() shares its step slice with the runner")
	}
}
