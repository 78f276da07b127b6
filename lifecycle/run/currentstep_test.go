package run_test

import (
	"context"
	"testing"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// current_step names the step executing from the run's first write as
// executing: a run polled while its first step runs, and a run failing in
// it, name that step (docs/spec.md#run-status), linear and graph alike.
func TestCurrentStepNamesFirstStep(t *testing.T) {
	t.Parallel()
	for name, after := range map[string][]string{"linear": nil, "graph": {"first"}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, nil)
			release := make(chan struct{})
			started := make(chan struct{}, 1)
			held := run.Step{Name: "first", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				started <- struct{}{}
				testWait(ctx, release)
				return run.StepOutput{}, nil
			}}
			failing := run.Step{Name: "first", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{}, &lifecycle.RunError{Code: "VALIDATION_ERROR", Message: "bad input", Permanent: true}
			}}
			second := okStep("second")
			second.After = after
			polled := run.Agent{Slug: "polled", Steps: []run.Step{held, second}}
			fails := run.Agent{Slug: "fails", Steps: []run.Step{failing, second}}
			r, _ := g.runner("a", nil, polled, fails)

			id := submit(t, r, polled.Slug)
			<-started
			g.idle()
			if st := status(t, r, id); st.CurrentStep != "first" || st.StepsCompleted != 0 {
				t.Errorf("polled in step 1: current_step %q, steps_completed %d; want first, 0", st.CurrentStep, st.StepsCompleted)
			}
			close(release)
			if st := g.wait(r, id, 0, 0); st.Status != "completed" || st.CurrentStep != "second" {
				t.Errorf("completed: %s, current_step %q; want completed, second", st.Status, st.CurrentStep)
			}

			id = submit(t, r, fails.Slug)
			st := g.wait(r, id, 0, 0)
			if st.Status != "failed" || st.CurrentStep != "first" {
				t.Errorf("failed in step 1: %s, current_step %q; want failed, first", st.Status, st.CurrentStep)
			}
		})
	}
}

// A parked run executes nothing: it names the step it last executed, and
// the claim that resumes it names the next (docs/spec.md#run-status).
func TestCurrentStepAcrossAWait(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	agent := run.Agent{Slug: "gated", Machine: lifecycle.MachineApproval, Steps: []run.Step{
		{Name: "draft", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Await: &run.Await{Approval: "ship"}}, nil
		}},
		{Name: "ship", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			started <- struct{}{}
			testWait(ctx, release)
			return run.StepOutput{}, nil
		}},
	}}
	r, _ := g.runner("a", nil, agent)
	id := submit(t, r, agent.Slug)
	if st := g.wait(r, id, 0, 0); st.Status != "awaiting_approval" || st.CurrentStep != "draft" {
		t.Errorf("parked: %s, current_step %q; want awaiting_approval, draft", st.Status, st.CurrentStep)
	}
	if _, err := r.Approve(context.Background(), id, lifecycle.ActorGateway, run.Decision{}); err != nil {
		t.Fatal(err)
	}
	<-started
	g.idle()
	if st := status(t, r, id); st.Status != "running" || st.CurrentStep != "ship" {
		t.Errorf("resumed: %s, current_step %q; want running, ship", st.Status, st.CurrentStep)
	}
	close(release)
	if st := g.wait(r, id, 0, 0); st.Status != "completed" || st.CurrentStep != "ship" {
		t.Errorf("completed: %s, current_step %q", st.Status, st.CurrentStep)
	}
}
