package conveyortest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/conveyortest"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// NLM is the upstream a step of yours calls; a test gives it a fake.
type NLM interface {
	Ask(ctx context.Context, question string) (string, error)
}

// Research is the step under test.
func Research(nlm NLM) func(context.Context, run.StepInput) (run.StepOutput, error) {
	return func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		answer, err := nlm.Ask(ctx, "what changed?")
		if err != nil {
			return run.StepOutput{}, err
		}
		return run.StepOutput{Summary: answer}, nil
	}
}

// fakeNLM hangs on the first call and answers the next.
type fakeNLM struct{ calls int }

func (f *fakeNLM) Ask(ctx context.Context, q string) (string, error) {
	f.calls++
	if f.calls == 1 {
		return "", conveyortest.Hang(ctx) // never answers: the step times out
	}
	return "three things", nil
}

// A step that hangs on its first attempt is timed out at the Runner's 120 s
// and retried after its 1 s backoff: 121 s of fake time, no real waiting.
func ExampleRunStep() {
	t := exampleT() // in a test: the test's *testing.T
	out, st := conveyortest.RunStep(t, run.Step{Name: "research", Run: Research(&fakeNLM{})}, nil)
	fmt.Println(st.Status, out.Summary, st.FinishedAt.Sub(st.StartedAt))
	// Output: completed three things 2m1s
}

// A step that hangs on every attempt fails its run AGENT_TIMEOUT after four
// attempts of 120 s and the backoffs between them.
func ExampleRunStep_timeout() {
	t := exampleT()
	hangs := func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{}, conveyortest.Hang(ctx)
	}
	_, st := conveyortest.RunStep(t, run.Step{Name: "research", Run: hangs}, nil)
	fmt.Println(st.Status, *st.Error, st.FinishedAt.Sub(st.StartedAt))

	noRetries := func(c *run.Config) { c.StepRetries = -1; c.StepTimeout = 30 * time.Second }
	_, st = conveyortest.RunStep(t, run.Step{Name: "research", Run: hangs}, nil, noRetries)
	fmt.Println(st.Status, *st.Error, st.FinishedAt.Sub(st.StartedAt))
	// Output:
	// failed AGENT_TIMEOUT: step research exceeded 120s limit 8m7s
	// failed AGENT_TIMEOUT: step research exceeded 30s limit 30s
}

// An agent of two steps: the first's upstream hangs once, so it is timed
// out at 120 s and retried after 1 s; the second reads the first's output.
// RunAgent returns the run's status.json and its step files.
func ExampleRunAgent() {
	t := exampleT()
	nlm := &fakeNLM{}
	agent := run.Agent{Slug: "digest", Steps: []run.Step{
		{Name: "research", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			out, err := Research(nlm)(ctx, in)
			out.Data = json.RawMessage(`{"topic":` + string(in.Input) + `}`)
			return out, err
		}},
		{Name: "write", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Summary: "wrote on " + string(in.Previous[0])}, nil
		}},
	}}
	st, steps := conveyortest.RunAgent(t, agent, json.RawMessage(`"go"`))
	fmt.Println(st.Status, st.FinishedAt.Sub(st.StartedAt))
	for _, s := range steps {
		fmt.Println(s.StepNumber, s.StepName, s.Status, s.Attempts, s.OutputSummary)
	}
	// Output:
	// completed 2m1s
	// 1 research completed 2 three things
	// 2 write completed 1 wrote on {"topic":"go"}
}

// An agent that drafts, waits for an owner's approval, and publishes what
// the approver handed it. StartAgent returns the run parked at its gate;
// Approve answers it and drives it on to its end. Reject, Deliver (an
// external event, with its payload) and Cancel work the same way.
func ExampleStartAgent() {
	t := exampleT()
	agent := run.Agent{Slug: "post", Machine: lifecycle.MachineApproval, Steps: []run.Step{
		{Name: "draft", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Summary: "drafted", Await: &run.Await{Approval: "publish"}}, nil
		}},
		{Name: "publish", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Summary: "published " + string(in.Approval.Payload) + " for " + in.Approval.DecidedBy}, nil
		}},
	}}
	r := conveyortest.StartAgent(t, agent, nil)
	fmt.Println(r.Status().Status, r.Status().Approval.Action)

	st := r.Approve(run.Decision{DecidedBy: "owner", Reason: "fine", Payload: json.RawMessage(`{"title": "v2"}`)})
	fmt.Println(st.Status, st.Approval.Reason)
	for _, s := range r.Steps() {
		fmt.Println(s.StepNumber, s.StepName, s.OutputSummary)
	}
	// Output:
	// awaiting_approval publish
	// completed fine
	// 1 draft drafted
	// 2 publish published {"title":"v2"} for owner
}
