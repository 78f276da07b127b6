package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// undoLog records the compensations a test's steps ran, in order.
type undoLog struct {
	mu   sync.Mutex
	ran  []string
	seen []run.CompensateInput
}

func (u *undoLog) add(in run.CompensateInput) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ran = append(u.ran, in.StepName)
	u.seen = append(u.seen, in)
}

func (u *undoLog) names() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.ran)
}

// undoable is okStep with a compensation that records itself, failing
// with fail when it is set.
func undoable(name string, u *undoLog, fail error) run.Step {
	s := okStep(name)
	s.CompensateAction = "undo-" + name
	s.Compensate = func(ctx context.Context, in run.CompensateInput) error {
		u.add(in)
		return fail
	}
	return s
}

// logSteps is a compensation_log's steps and outcomes, "step:outcome".
func logSteps(st lifecycle.RunStatus) []string {
	var out []string
	for _, e := range st.CompensationLog {
		out = append(out, e.Step+":"+e.Outcome)
	}
	return out
}

func TestCompensation(t *testing.T) {
	t.Parallel()
	permanent := &lifecycle.RunError{Code: "UPSTREAM_UNAVAILABLE", Message: "refund refused", Permanent: true}
	tests := []struct {
		name      string
		machine   string
		onFailure bool
		// last is the third step: it blocks until canceled, parks the
		// run, or fails.
		last      string
		undoFail  error
		wantEnd   string
		wantLog   []string
		wantError string
	}{
		{"cancel while a step runs", lifecycle.MachineCancelable, false, "block", nil, "canceled",
			[]string{"charge:compensated", "reserve:compensated"}, ""},
		{"cancel while a step runs, approval machine", lifecycle.MachineApproval, false, "block", nil, "cancelled",
			[]string{"charge:compensated", "reserve:compensated"}, ""},
		{"cancel while parked", lifecycle.MachineApproval, false, "park", nil, "cancelled",
			[]string{"ship:compensated", "charge:compensated", "reserve:compensated"}, ""},
		{"a compensation fails for good", lifecycle.MachineCancelable, false, "block", permanent, "canceled",
			[]string{"charge:failed", "reserve:failed"}, ""},
		{"failure compensates when asked", lifecycle.MachineApproval, true, "fail", nil, "failed",
			[]string{"charge:compensated", "reserve:compensated"}, "PERMANENT_FAIL"},
		{"failure does not compensate unasked", lifecycle.MachineApproval, false, "fail", nil, "failed", nil, "PERMANENT_FAIL"},
		{"reject compensates when asked", lifecycle.MachineApproval, true, "reject", nil, "failed",
			[]string{"ship:compensated", "charge:compensated", "reserve:compensated"}, "APPROVAL_REJECTED"},
		{"reject does not compensate unasked", lifecycle.MachineApproval, false, "reject", nil, "failed", nil, "APPROVAL_REJECTED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, nil)
			u := &undoLog{}
			b := newBlocker()
			third := undoable("ship", u, tt.undoFail)
			switch tt.last {
			case "block":
				third = b.step("ship") // no Compensate: a step cut by the cancel never completed
			case "park", "reject":
				third.Run = func(context.Context, run.StepInput) (run.StepOutput, error) {
					return run.StepOutput{Data: json.RawMessage(`{"step":"ship"}`), Await: &run.Await{Approval: "publish"}}, nil
				}
			case "fail":
				third = run.Step{Name: "ship", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
					return run.StepOutput{}, &lifecycle.RunError{Code: "PERMANENT_FAIL", Message: "no", Permanent: true}
				}}
			}
			agent := run.Agent{Slug: "shop", Machine: tt.machine, CompensateOnFailure: tt.onFailure, Steps: []run.Step{
				undoable("reserve", u, tt.undoFail), undoable("charge", u, tt.undoFail), third, okStep("notify")}}
			r, _ := g.runner("a", func(c *run.Config) { c.StepRetries = 1 }, agent)
			res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "shop", Input: json.RawMessage(`{"order":7}`)})
			if err != nil {
				t.Fatal(err)
			}
			id := res.RunID
			switch tt.last {
			case "block":
				<-b.started
				if _, err := r.Cancel(context.Background(), id, lifecycle.ActorGateway, run.CancelRequest{Reason: "stop"}); err != nil {
					t.Fatal(err)
				}
			case "reject":
				if st := g.wait(r, id, time.Second, time.Hour); st.Status != "awaiting_approval" {
					t.Fatalf("not parked: %+v", st)
				}
				st, err := r.Reject(context.Background(), id, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner", Reason: "no"})
				want := "failed"
				if tt.onFailure {
					want = "compensating"
				}
				if err != nil || st.Status != want {
					t.Fatalf("reject: %+v %v", st, err)
				}
			case "park":
				if st := g.wait(r, id, time.Second, time.Hour); st.Status != "awaiting_approval" {
					t.Fatalf("not parked: %+v", st)
				}
				st, err := r.Cancel(context.Background(), id, lifecycle.ActorGateway, run.CancelRequest{Reason: "stop"})
				if err != nil || st.Status != "compensating" || st.FinishedAt != nil {
					t.Fatalf("cancel of a parked run with steps to undo: %+v %v", st, err)
				}
			}
			st := g.wait(r, id, time.Second, time.Hour)
			if st.Status != tt.wantEnd {
				t.Fatalf("ended %s, want %s: %+v", st.Status, tt.wantEnd, st)
			}
			if got := logSteps(st); !slices.Equal(got, tt.wantLog) {
				t.Errorf("compensation_log %v, want %v", got, tt.wantLog)
			}
			if tt.wantError == "" && st.Error != nil {
				t.Errorf("error %q, want none", *st.Error)
			}
			if tt.wantError != "" && (st.Error == nil || !strings.HasPrefix(*st.Error, tt.wantError)) {
				t.Errorf("error %v, want %s", st.Error, tt.wantError)
			}
			wantRuns := len(tt.wantLog) // a permanent error is not retried
			if got := u.names(); len(got) != wantRuns {
				t.Errorf("compensations ran %v, want %d", got, wantRuns)
			}
			for _, e := range st.CompensationLog {
				if e.Action != "undo-"+e.Step || e.StartedAt.IsZero() || e.EndedAt.Before(e.StartedAt) || e.Attempts != 1 {
					t.Errorf("entry %+v", e)
				}
				if (e.Outcome == "failed") != (e.Error != "") {
					t.Errorf("entry %+v: error and outcome disagree", e)
				}
			}
			for _, in := range u.seen {
				if string(in.Input) != `{"order":7}` || string(in.Output) != `{"step":"`+in.StepName+`"}` || in.Attempt != 1 {
					t.Errorf("compensation input %+v", in)
				}
			}
		})
	}
}

// A compensation that fails and then succeeds is retried like a step, and
// its attempts are logged.
func TestCompensationRetries(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	b := newBlocker()
	calls := 0
	undo := okStep("charge")
	undo.Compensate = func(ctx context.Context, in run.CompensateInput) error {
		calls++
		if in.Attempt < 3 {
			return errors.New("refund service busy")
		}
		return nil
	}
	agent := run.Agent{Slug: "shop", Machine: lifecycle.MachineCancelable, Steps: []run.Step{undo, b.step("ship")}}
	r, _ := g.runner("a", func(c *run.Config) { c.StepRetries = 3 }, agent)
	id := submit(t, r, "shop")
	<-b.started
	if _, err := r.Cancel(context.Background(), id, lifecycle.ActorGateway, run.CancelRequest{}); err != nil {
		t.Fatal(err)
	}
	st := g.wait(r, id, time.Second, time.Hour)
	if st.Status != "canceled" || len(st.CompensationLog) != 1 || st.CompensationLog[0].Attempts != 3 ||
		st.CompensationLog[0].Outcome != "compensated" || st.CompensationLog[0].Action != "compensate" || calls != 3 {
		t.Fatalf("after retries (%d calls): %+v", calls, st)
	}
}

// Compensate on the canonical machine, which has no cancel and no
// compensating state, is refused at NewRunner.
func TestCompensateNeedsAMachineThatCompensates(t *testing.T) {
	t.Parallel()
	s := okStep("charge")
	s.Compensate = func(context.Context, run.CompensateInput) error { return nil }
	_, err := run.NewRunner(run.Config{Store: memStore(t)}, run.Agent{Slug: "a", Steps: []run.Step{s}})
	if !errors.Is(err, run.ErrInvalidConfig) {
		t.Fatalf("canonical agent with Compensate: %v", err)
	}
}

// The compensation phase has RunTimeout from its start: a compensation
// still running then is recorded failed AGENT_TIMEOUT, those after it are
// recorded so without running, and the run still ends canceled.
func TestCompensationPhaseDeadline(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	b := newBlocker()
	u := &undoLog{}
	hang := okStep("charge")
	hang.Compensate = func(ctx context.Context, in run.CompensateInput) error {
		u.add(in)
		testSelect(ctx, make(chan struct{})) // until the phase's deadline
		return ctx.Err()
	}
	agent := run.Agent{Slug: "shop", Machine: lifecycle.MachineCancelable, Steps: []run.Step{undoable("reserve", u, nil), hang, b.step("ship")}}
	r, _ := g.runner("a", func(c *run.Config) { c.RunTimeout, c.StepTimeout = 10*time.Minute, time.Hour }, agent)
	id := submit(t, r, "shop")
	<-b.started
	if _, err := r.Cancel(context.Background(), id, lifecycle.ActorGateway, run.CancelRequest{}); err != nil {
		t.Fatal(err)
	}
	st := g.wait(r, id, time.Minute, 2*time.Hour)
	if st.Status != "canceled" || !slices.Equal(logSteps(st), []string{"charge:failed", "reserve:failed"}) {
		t.Fatalf("after the phase's deadline: %+v", st)
	}
	for _, e := range st.CompensationLog {
		if !strings.HasPrefix(e.Error, "AGENT_TIMEOUT") {
			t.Errorf("entry %+v: want AGENT_TIMEOUT", e)
		}
	}
	if got := u.names(); !slices.Equal(got, []string{"charge"}) {
		t.Errorf("compensations ran %v, want charge alone", got)
	}
}
