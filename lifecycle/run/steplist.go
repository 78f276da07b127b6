package run

import (
	"context"

	"github.com/runconveyor/conveyor/lifecycle"
)

// AllSteps reads a run's steps as its agent declares them, in step order
// (GET /runs/{runId}/steps): the step file of each step that has one, and
// for the others a record of the step's number and name in state pending,
// or running for the step the run is executing (a linear agent's step
// steps_completed+1, a graph agent's current_step, while a runner holds
// the run). A run of an agent this runner does not have lists its files
// only, as Steps does.
func (r *Runner) AllSteps(ctx context.Context, runID string) ([]lifecycle.StepRecord, error) {
	doc, err := r.reads.status(ctx, runID)
	if err != nil {
		return nil, err
	}
	files, err := r.reads.readSteps(ctx, doc.AgentSlug, runID)
	if err != nil {
		return nil, err
	}
	agent, ok := r.reads.cat.agent(doc.AgentSlug)
	if !ok {
		return files, nil
	}
	return declaredSteps(agent, &doc, files, r.reads.cat.flowOfDoc(&doc)), nil
}

// declaredSteps merges a run's step files into its agent's declared steps.
func declaredSteps(agent *agentDef, doc *lifecycle.RunStatus, files []lifecycle.StepRecord, f *flow) []lifecycle.StepRecord {
	byNumber := make(map[int]lifecycle.StepRecord, len(files))
	for _, rec := range files {
		byNumber[rec.StepNumber] = rec
	}
	executing := doc.Lease != nil && f.executing(doc.Status)
	out := make([]lifecycle.StepRecord, 0, len(agent.Steps))
	for i, s := range agent.Steps {
		if rec, ok := byNumber[i+1]; ok && rec.StepName == s.Name {
			out = append(out, rec)
			continue
		}
		rec := lifecycle.StepRecord{StepNumber: i + 1, StepName: s.Name, Status: lifecycle.StepPending, After: s.After}
		current := s.Name == doc.CurrentStep
		if agent.graph == nil {
			current = i == doc.StepsCompleted
		}
		if executing && current {
			rec.Status = lifecycle.StepRunning
		}
		out = append(out, rec)
	}
	return out
}
