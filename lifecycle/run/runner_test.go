package run_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

func TestRunnerHappyPath(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	propose := run.Step{Name: "create-proposal", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		if len(in.Previous) != 2 || string(in.Previous[1]) != `{"step":"execute-agent"}` {
			t.Errorf("previous outputs %s", in.Previous)
		}
		return run.StepOutput{Summary: "1 proposal", Proposals: []string{"prop_2026-02-14_xyz789"},
			Files: map[string][]byte{"proposal.json": []byte(`{"id":"prop_2026-02-14_xyz789"}`)}}, nil
	}}
	agent := run.Agent{Slug: "archivist-violin", Steps: []run.Step{okStep("load-context"), okStep("execute-agent"), propose}}
	r, _ := g.runner("runner-a", nil, agent)
	ctx := context.Background()
	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "archivist-violin", Input: json.RawMessage(`{"q": 1}`)})
	if err != nil {
		t.Fatal(err)
	}
	st := g.wait(r, res.RunID, 0, 0)
	if st.Status != "completed" || st.StepsCompleted != 3 || st.StepsTotal != 3 || st.Error != nil || st.FinishedAt == nil {
		t.Fatalf("status %+v", st)
	}
	if len(st.ProposalsCreated) != 1 || st.ProposalsCreated[0] != "prop_2026-02-14_xyz789" {
		t.Errorf("proposals %v", st.ProposalsCreated)
	}
	steps, err := r.Steps(ctx, res.RunID)
	if err != nil || len(steps) != 3 {
		t.Fatalf("steps %v %v", steps, err)
	}
	for i, s := range steps {
		if s.StepNumber != i+1 || s.Status != lifecycle.StepCompleted {
			t.Errorf("step %d: %+v", i, s)
		}
	}
	var m manifestDoc
	key, _ := layout.RunManifestKey("archivist-violin", res.RunID)
	readJSON(t, g.store, key, &m)
	if m.Status != "completed" || len(m.Steps) != 3 || m.Outputs[0] != "proposal.json" {
		t.Errorf("manifest %+v", m)
	}
}
