package runtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/lifecycle/run/runtest"
)

// NLM is the upstream a step of yours calls; a test gives it a fake.
type NLM interface {
	Ask(ctx context.Context, question string) (string, error)
}

// Research is the step under test.
func Research(nlm NLM) run.StepFunc {
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
		return "", runtest.Hang(ctx) // never answers: the step times out
	}
	return "three things", nil
}

// A step that hangs on its first attempt is timed out at the Runner's 120 s
// and retried after its 1 s backoff: 121 s of fake time, no real waiting.
func ExampleRunStep() {
	t := exampleT() // in a test: the test's *testing.T
	out, st := runtest.RunStep(t, run.Step{Name: "research", Run: Research(&fakeNLM{})}, nil)
	fmt.Println(st.Status, out.Summary, st.FinishedAt.Sub(st.StartedAt))
	// Output: completed three things 2m1s
}

// A step that hangs on every attempt fails its run AGENT_TIMEOUT after four
// attempts of 120 s and the backoffs between them.
func ExampleRunStep_timeout() {
	t := exampleT()
	hangs := func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{}, runtest.Hang(ctx)
	}
	_, st := runtest.RunStep(t, run.Step{Name: "research", Run: hangs}, nil)
	fmt.Println(st.Status, *st.Error, st.FinishedAt.Sub(st.StartedAt))

	noRetries := func(c *run.Config) { c.StepRetries = -1; c.StepTimeout = 30 * time.Second }
	_, st = runtest.RunStep(t, run.Step{Name: "research", Run: hangs}, nil, noRetries)
	fmt.Println(st.Status, *st.Error, st.FinishedAt.Sub(st.StartedAt))
	// Output:
	// failed AGENT_TIMEOUT: step research exceeded 120s limit 8m7s
	// failed AGENT_TIMEOUT: step research exceeded 30s limit 30s
}

// exampleT stands in for a test's *testing.T in these examples: it panics
// where a test would fail.
func exampleT() testing.TB { return panicTB{} }

type panicTB struct{ testing.TB }

func (panicTB) Helper()                           {}
func (panicTB) Cleanup(func())                    {}
func (panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
