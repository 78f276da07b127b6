package prommetrics

import (
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// Seed creates, at zero, the series the given agents' runs and job types'
// jobs will move: every edge of their machines (and the creation, from "")
// on the transition counters, their outcomes on the duration histograms,
// and the per-type and per-step counters. A series that exists from the
// start reads 0 instead of nothing, so rates and ratios over it need no
// absent(), and a counter's first increment is seen as one.
//
// The labels stay bounded: agents and job types are the configured ones
// (a run of another agent or a job of an unknown type is refused before
// any write), states are the machines'. Failed attempts by error code are
// not seeded: the codes an attempt can end with are not the machine's.
func (m *Metrics) Seed(agents []run.Agent, jobTypes []lifecycle.JobType) {
	runEdges := map[[2]string]bool{}
	for _, a := range agents {
		spec := runSpec(a.Machine)
		for _, e := range edges(spec) {
			m.runAgentTransitions.WithLabelValues(a.Slug, e[0], e[1])
			runEdges[e] = true
		}
		for _, st := range spec.Terminal {
			m.runDuration.WithLabelValues(a.Slug, st, m.opts.tenant)
		}
		for _, step := range a.Steps {
			m.stepsAbandoned.WithLabelValues(a.Slug, step.Name)
			for _, st := range []string{"completed", "failed"} {
				m.stepDuration.WithLabelValues(a.Slug, step.Name, st)
			}
		}
	}
	for e := range runEdges {
		m.runTransitions.WithLabelValues(e[0], e[1], m.opts.tenant)
	}
	for _, jt := range jobTypes {
		t := string(jt)
		// Each type's own machine: the spec's for the NLM types, the
		// general one for the user's.
		spec := machine.JobMachineNamed(machine.JobMachineForType(jt)).Spec()
		for _, e := range edges(spec) {
			m.jobTransitions.WithLabelValues(t, e[0], e[1])
		}
		for _, st := range spec.States {
			if st != spec.Initial && !contains(spec.Terminal, st) {
				m.jobStateDuration.WithLabelValues(t, st)
			}
		}
		for _, st := range spec.Terminal {
			m.jobDuration.WithLabelValues(t, st)
		}
		m.jobsDead.WithLabelValues(t)
		m.jobRetries.WithLabelValues(t)
		m.jobLeaseLosses.WithLabelValues(t)
	}
}

// edges lists the moves of spec as (from, to), the creation ("", initial)
// first, each once.
func edges(spec lifecycle.Spec) [][2]string {
	out := [][2]string{{"", spec.Initial}}
	seen := map[[2]string]bool{out[0]: true}
	for _, t := range spec.Transitions {
		e := [2]string{t.From, t.To}
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}

// runSpec is the run machine of the given name; an agent's machine is
// defaulted by the Runner, so an empty name is the canonical one.
func runSpec(name string) lifecycle.Spec {
	switch name {
	case lifecycle.MachineCancelable:
		return machine.CancelableRun().Spec()
	case lifecycle.MachineApproval:
		return machine.ApprovalRun().Spec()
	}
	return machine.CanonicalRun().Spec()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
