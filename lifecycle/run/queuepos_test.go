package run_test

import (
	"context"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// A queued run's status read says its place among its agent's queued
// runs, oldest first (docs/spec.md#run-status), and AllSteps lists every
// declared step: the executing one running, the others pending, until
// their files are written (GET /runs/{runId}/steps).
func TestQueuePositionAndAllSteps(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	release := make(chan struct{})
	held := run.Step{Name: "hold", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		testWait(ctx, release)
		return run.StepOutput{}, nil
	}}
	agent := run.Agent{Slug: "one-at-a-time", Concurrency: 1, Steps: []run.Step{held, okStep("after")}}
	r, _ := g.runner("a", nil, agent)
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = submit(t, r, agent.Slug)
		g.clock.Advance(time.Second) // a second apart: ids in submit order
	}
	g.waitFor(r, ids[0], 0, 0, func(st lifecycle.RunStatus) bool { return st.Status == "running" })
	g.waitFor(r, ids[2], 0, 0, func(st lifecycle.RunStatus) bool { return st.Status == "queued" })
	g.idle()
	for i, want := range []int{0, 1, 2} {
		if st := status(t, r, ids[i]); st.QueuePosition != want {
			t.Errorf("run %d (%s): queue_position %d; want %d", i+1, st.Status, st.QueuePosition, want)
		}
	}
	ctx := context.Background()
	steps, err := r.AllSteps(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := stepLine(steps); got != "hold:running after:pending" {
		t.Errorf("running run's steps: %s", got)
	}
	if steps, _ := r.AllSteps(ctx, ids[1]); stepLine(steps) != "hold:pending after:pending" {
		t.Errorf("queued run's steps: %s", stepLine(steps))
	}
	close(release)
	st := g.wait(r, ids[0], 0, 0)
	if st.Status != "completed" {
		t.Fatalf("run 1: %s", st.Status)
	}
	steps, _ = r.AllSteps(ctx, ids[0])
	if stepLine(steps) != "hold:completed after:completed" || steps[1].FinishedAt == nil {
		t.Errorf("completed run's steps: %s, %+v", stepLine(steps), steps)
	}
	for _, id := range ids[1:] {
		g.wait(r, id, 0, 0)
	}
}

func stepLine(steps []lifecycle.StepRecord) string {
	s := ""
	for i, r := range steps {
		if i > 0 {
			s += " "
		}
		s += r.StepName + ":" + string(r.Status)
	}
	return s
}
