package conveyortest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/conveyortest"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

func TestRunAgent(t *testing.T) {
	t.Parallel()
	fetch := run.Step{Name: "fetch", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "fetched", Data: json.RawMessage(`{"n":` + string(in.Input) + `}`)}, nil
	}}
	flaky := run.Step{Name: "write", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		if in.Attempt == 1 {
			return run.StepOutput{}, conveyortest.Hang(ctx)
		}
		return run.StepOutput{Summary: "wrote " + string(in.Previous[0]), Proposals: []string{"prop-1"}}, nil
	}}
	gate := run.Step{Name: "propose", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "asks", Await: &run.Await{Approval: "publish"}}, nil
	}}
	broken := run.Step{Name: "broken", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		panic("nil map")
	}}
	tests := []struct {
		name      string
		agent     run.Agent
		status    string
		code      string
		summaries []string
		attempts  []int
	}{
		{name: "two steps, the second retried", agent: run.Agent{Slug: "two", Steps: []run.Step{fetch, flaky}},
			status: "completed", summaries: []string{"fetched", `wrote {"n":7}`}, attempts: []int{1, 2}},
		{name: "parks at an approval gate", agent: run.Agent{Slug: "gated", Machine: lifecycle.MachineApproval, Steps: []run.Step{fetch, gate}},
			status: "awaiting_approval", summaries: []string{"fetched", "asks"}, attempts: []int{1, 1}},
		{name: "a panic fails the run", agent: run.Agent{Slug: "panics", Steps: []run.Step{fetch, broken}},
			status: "failed", code: codes.InternalError, summaries: []string{"fetched", ""}, attempts: []int{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, steps := conveyortest.RunAgent(t, tt.agent, json.RawMessage(`7`))
			if st.Status != tt.status || code(st) != tt.code {
				t.Fatalf("status %s, code %q; want %s, %q (error %v)", st.Status, code(st), tt.status, tt.code, st.Error)
			}
			if len(steps) != len(tt.summaries) {
				t.Fatalf("%d step files, want %d", len(steps), len(tt.summaries))
			}
			for i, s := range steps {
				if s.OutputSummary != tt.summaries[i] || s.Attempts != tt.attempts[i] {
					t.Errorf("step %d: summary %q after %d attempts, want %q after %d", i+1, s.OutputSummary, s.Attempts, tt.summaries[i], tt.attempts[i])
				}
			}
		})
	}
}

func TestAgentFailures(t *testing.T) { // not parallel: it shortens the stall
	defer conveyortest.SetStall(50 * time.Millisecond)()
	release := make(chan struct{})
	tests := []struct {
		name string
		fn   func(tb testing.TB)
		want string
	}{
		{"a step that blocks without Hang", func(tb testing.TB) {
			conveyortest.RunStep(tb, run.Step{Name: "stuck", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return run.StepOutput{}, errors.New("released")
			}}, nil)
		}, "attempt 1 of step 1 has not returned after 50ms of real time: a step that should hang in a test must wait with conveyortest.Hang(ctx)"},
		{"an invalid step name", func(tb testing.TB) {
			conveyortest.RunStep(tb, run.Step{Name: "../x", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{}, nil
			}}, nil)
		}, "conveyortest: run: invalid runner config"},
		{"invalid input", func(tb testing.TB) {
			conveyortest.RunAgent(tb, run.Agent{Slug: "a", Steps: []run.Step{{Name: "s", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{}, nil
			}}}}, json.RawMessage(`{`))
		}, "conveyortest: submit:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := failure(tt.fn)
			if !strings.Contains(got, tt.want) {
				t.Errorf("failed with %q, want it to contain %q", got, tt.want)
			}
		})
	}
	close(release) // the stuck step returns; goleak checks nothing is left
}
