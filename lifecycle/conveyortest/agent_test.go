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

// StartAgent's run is answered and continued: approved, rejected, given
// its external event or cancelled at its wait, each step after a wait
// given what it was answered with.
func TestStartAgent(t *testing.T) {
	t.Parallel()
	said := func(name string) run.Step {
		return run.Step{Name: name, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			s := name
			if in.Approval != nil {
				s += " approval " + in.Approval.Reason + " " + string(in.Approval.Payload)
			}
			if in.Event != nil {
				s += " event " + in.Event.ID + " " + string(in.Event.Payload)
			}
			return run.StepOutput{Summary: s}, nil
		}}
	}
	gate := run.Step{Name: "gate", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "asks", Await: &run.Await{Approval: "go"}}, nil
	}}
	wait := run.Step{Name: "wait", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "waits", Await: &run.Await{ExternalEvent: "ci"}}, nil
	}}
	agent := run.Agent{Slug: "answered", Machine: lifecycle.MachineApproval, Steps: []run.Step{gate, wait, said("last")}}
	tests := []struct {
		name   string
		answer func(r *conveyortest.AgentRun) lifecycle.RunStatus
		status string
		last   string // the last step's summary, "" when it did not run
	}{
		{"approve, deliver", func(r *conveyortest.AgentRun) lifecycle.RunStatus {
			if st := r.Approve(run.Decision{Reason: "ok", Payload: json.RawMessage(`[1]`)}); st.Status != "waiting_external" {
				t.Errorf("after approve: %s", st.Status)
			}
			return r.Deliver(run.ExternalEvent{Type: "ci", ID: "e1", Payload: json.RawMessage(`{"green":true}`)})
		}, "completed", `last approval ok [1] event e1 {"green":true}`},
		{"reject", func(r *conveyortest.AgentRun) lifecycle.RunStatus {
			return r.Reject(run.Decision{Reason: "no"})
		}, "failed", ""},
		{"cancel at the gate", func(r *conveyortest.AgentRun) lifecycle.RunStatus {
			return r.Cancel("changed my mind")
		}, "cancelled", ""},
		{"cancel at the external wait", func(r *conveyortest.AgentRun) lifecycle.RunStatus {
			r.Approve(run.Decision{})
			return r.Cancel("too late")
		}, "cancelled", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := conveyortest.StartAgent(t, agent, nil)
			if st := r.Status(); st.Status != "awaiting_approval" {
				t.Fatalf("started: %s", st.Status)
			}
			st := tt.answer(r)
			if st.Status != tt.status || r.Status().Status != tt.status {
				t.Fatalf("status %s (%s), want %s (error %v)", st.Status, r.Status().Status, tt.status, st.Error)
			}
			steps := r.Steps()
			last := ""
			if len(steps) == 3 {
				last = steps[2].OutputSummary
			}
			if last != tt.last {
				t.Errorf("last step %q, want %q", last, tt.last)
			}
		})
	}
}

// A call the Runner refuses fails the test with the Runner's error.
func TestStartAgentRefused(t *testing.T) {
	t.Parallel()
	got := failure(func(tb testing.TB) {
		r := conveyortest.StartAgent(tb, run.Agent{Slug: "plain", Steps: []run.Step{{Name: "s", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{}, nil
		}}}}, nil)
		r.Cancel("no")
	})
	if !strings.Contains(got, "conveyortest: cancel run") || !strings.Contains(got, "cancel") {
		t.Errorf("failed with %q", got)
	}
}
