package conveyortest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// RunnerOption changes the run.Config RunStep and RunAgent build the
// Runner from, e.g. its StepTimeout, StepRetries, RetryBackoff or
// RunTimeout. The helpers then set Store (a memstore), Clock (their fake
// clock), Owner and Node, a Logger that discards unless one is given, and
// push PollInterval, HeartbeatInterval, ParkedPollInterval and
// LeaseDuration out of the test's way.
type RunnerOption func(*run.Config)

// RunStep runs step as the one step of an agent through the real Runner,
// the run's input being input (nil for none), and returns what the step's
// last attempt returned and the run's final status.json (completed or
// failed; or parked, when the step's output awaits an approval or an
// external event). An empty step Name means "step". The test fails when
// the run cannot be submitted or does not end.
func RunStep(tb testing.TB, step run.Step, input json.RawMessage, opts ...RunnerOption) (run.StepOutput, lifecycle.RunStatus) {
	tb.Helper()
	if step.Name == "" {
		step.Name = "step"
	}
	agent := run.Agent{Slug: name, Steps: []run.Step{step}}
	d := runAgent(tb, agent, input, opts)
	d.stop()
	return d.lastOutput(), d.status
}

// RunAgent runs one run of agent through the real Runner, the run's input
// being input (nil for none), and returns its final status.json and its
// step files in step order. The test fails when the agent is refused, or
// the run cannot be submitted or does not end. A run that parks (at an
// approval gate, or waiting for an external event) is returned parked; to
// answer it and go on, use StartAgent.
func RunAgent(tb testing.TB, agent run.Agent, input json.RawMessage, opts ...RunnerOption) (lifecycle.RunStatus, []lifecycle.StepRecord) {
	tb.Helper()
	d := runAgent(tb, agent, input, opts)
	d.stop()
	d.readSteps()
	return d.status, d.steps
}

// AgentRun is one run started by StartAgent, resting (ended, or parked at
// an approval gate or an external wait). Its methods act on the run as its
// owner would, through the real Runner, then drive it on to its next
// rest and return its status.json there; a call the Runner refuses (an
// approval of a run not at its gate, a cancel on the canonical machine)
// fails the test with the Runner's error.
type AgentRun struct {
	d *agentDriver
}

// StartAgent is RunAgent for a run that waits: it submits one run of
// agent and drives it until it ends or parks, and returns it still
// served by its Runner (stopped once the run ends, or when the test
// ends), so that Approve, Reject, Deliver and Cancel can answer it and
// continue it.
func StartAgent(tb testing.TB, agent run.Agent, input json.RawMessage, opts ...RunnerOption) *AgentRun {
	tb.Helper()
	return &AgentRun{d: runAgent(tb, agent, input, opts)}
}

// Status is the run's status.json where it last came to rest.
func (a *AgentRun) Status() lifecycle.RunStatus { return a.d.status }

// Steps reads the run's step files, in step order.
func (a *AgentRun) Steps() []lifecycle.StepRecord {
	a.d.tb.Helper()
	a.d.readSteps()
	return a.d.steps
}

// Approve approves the run at its gate, as the gateway, and drives it on;
// the steps after the gate are given dec (StepInput.Approval).
func (a *AgentRun) Approve(dec run.Decision) lifecycle.RunStatus {
	a.d.tb.Helper()
	return a.d.act("approve", func(ctx context.Context) error {
		_, err := a.d.r.Approve(ctx, a.d.runID, lifecycle.ActorGateway, dec)
		return err
	})
}

// Reject rejects the run at its gate, as the gateway: it fails
// APPROVAL_REJECTED.
func (a *AgentRun) Reject(dec run.Decision) lifecycle.RunStatus {
	a.d.tb.Helper()
	return a.d.act("reject", func(ctx context.Context) error {
		_, err := a.d.r.Reject(ctx, a.d.runID, lifecycle.ActorGateway, dec)
		return err
	})
}

// Deliver hands the run the external event it waits for, as the gateway,
// and drives it on; the steps after the wait are given ev
// (StepInput.Event).
func (a *AgentRun) Deliver(ev run.ExternalEvent) lifecycle.RunStatus {
	a.d.tb.Helper()
	return a.d.act("deliver", func(ctx context.Context) error {
		_, err := a.d.r.Deliver(ctx, a.d.runID, lifecycle.ActorGateway, ev)
		return err
	})
}

// Cancel cancels the run, as the gateway, with reason, and drives it to
// its end (a run of the canonical machine cannot be cancelled).
func (a *AgentRun) Cancel(reason string) lifecycle.RunStatus {
	a.d.tb.Helper()
	return a.d.act("cancel", func(ctx context.Context) error {
		_, err := a.d.r.Cancel(ctx, a.d.runID, lifecycle.ActorGateway, run.CancelRequest{Reason: reason})
		return err
	})
}

// attempt is one call of a step.
type attempt struct {
	step, n  int
	hung     bool
	returned bool
	out      run.StepOutput
}

type agentDriver struct {
	tb     testing.TB
	clk    *fakeClock
	r      *run.Runner
	runID  string
	stop   func() // stops the Runner
	status lifecycle.RunStatus
	steps  []lifecycle.StepRecord

	mu       sync.Mutex
	attempts []*attempt
}

func (d *agentDriver) lastOutput() run.StepOutput {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.attempts) == 0 {
		return run.StepOutput{}
	}
	return d.attempts[len(d.attempts)-1].out
}

// wrap makes step i report its attempts to the driver, for its messages.
func (d *agentDriver) wrap(i int, s run.Step) run.Step {
	orig := s.Run
	s.Run = func(ctx context.Context, in run.StepInput) (out run.StepOutput, err error) {
		a := &attempt{step: i, n: in.Attempt}
		d.mu.Lock()
		d.attempts = append(d.attempts, a)
		d.mu.Unlock()
		defer func() { // also at a panic, which the Runner records
			d.mu.Lock()
			a.returned, a.out = true, out
			d.mu.Unlock()
		}()
		ctx = withHang(ctx, func() {
			d.mu.Lock()
			a.hung = true
			d.mu.Unlock()
		})
		return orig(ctx, in)
	}
	return s
}

// stuck describes what the driver waited for in vain: an attempt that
// neither returned nor waits in Hang (the Runner is busy with it), or a
// Runner idle with nothing to wait for. "" while the Runner is still busy
// with its own work.
func (d *agentDriver) stuck(idle bool, runID string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.attempts) > 0 {
		a := d.attempts[len(d.attempts)-1]
		if !a.returned && !a.hung {
			return fmt.Sprintf("attempt %d of step %d has not returned after %v of real time: a step that should hang in a test must wait with conveyortest.Hang(ctx) so the fake clock can move to its deadline (run %s)",
				a.n, a.step+1, stall, runID)
		}
	}
	if idle {
		return fmt.Sprintf("run %s has not ended and the Runner waits for nothing that can happen", runID)
	}
	return ""
}

func settled(st lifecycle.RunStatus) bool {
	switch st.Status {
	case "completed", "failed", "succeeded", "canceled", "cancelled", "timeout":
		return true
	case "awaiting_approval", "waiting_external":
		return st.Lease == nil
	}
	return false
}

// runAgent starts a Runner for agent and runs one run of it to its end or
// until it parks; the Runner keeps serving it until the test ends.
func runAgent(tb testing.TB, agent run.Agent, input json.RawMessage, opts []RunnerOption) *agentDriver {
	tb.Helper()
	d := &agentDriver{tb: tb, clk: newClock()}
	agent.Steps = append([]run.Step(nil), agent.Steps...)
	for i, s := range agent.Steps {
		if s.Run != nil {
			agent.Steps[i] = d.wrap(i, s)
		}
	}
	var cfg run.Config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.Store = memstore.New()
	cfg.Clock = d.clk
	cfg.Owner, cfg.Node = name, name
	cfg.PollInterval = far
	cfg.ParkedPollInterval = far
	cfg.HeartbeatInterval = far
	cfg.LeaseDuration = 2 * far
	if cfg.Logger == nil {
		cfg.Logger = discard()
	}
	r, err := run.NewRunner(cfg, agent)
	if err != nil {
		tb.Fatalf(name+": %v", err)
	}
	d.r = r
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// Started busy: the Runner counts as working from here, not from when
	// its goroutine gets to run.
	rctx := activity.Start(ctx, d.clk)
	go func() {
		defer close(done)
		_ = r.Run(rctx)
	}()
	var once sync.Once
	d.stop = func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(d.stop)

	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: agent.Slug, Input: input})
	if err != nil {
		tb.Fatalf(name+": submit: %v", err)
	}
	d.runID = res.RunID
	d.settle()
	return d
}

// settle drives the fake clock until the run rests: it ends, or parks.
func (d *agentDriver) settle() {
	d.tb.Helper()
	var (
		st   lifecycle.RunStatus
		serr error
	)
	ctx := context.Background()
	failed := ""
	d.clk.drive(stall, func() bool {
		st, serr = d.r.Status(ctx, d.runID)
		return serr != nil || settled(st)
	}, nil, func(idle bool) string { return d.stuck(idle, d.runID) }, func(msg string) {
		if msg == "" {
			msg = fmt.Sprintf("run %s is %s and nothing happened for %v of real time", d.runID, st.Status, stall)
		}
		failed = msg
	})
	if failed != "" {
		d.tb.Fatalf(name+": %s", failed)
	}
	if serr != nil {
		d.tb.Fatalf(name+": status of run %s: %v", d.runID, serr)
	}
	d.status = st
	if st.Status != "awaiting_approval" && st.Status != "waiting_external" {
		d.stop() // ended: nothing left to serve
	}
}

// act makes a control call on the run, then drives it to its next rest.
func (d *agentDriver) act(what string, call func(ctx context.Context) error) lifecycle.RunStatus {
	d.tb.Helper()
	// The call's own work (the write, the hand-over to the Runner) is
	// counted as work, so the clock cannot move under it.
	ctx, end := activity.Enter(context.Background(), d.clk)
	err := call(ctx)
	end()
	if err != nil {
		d.tb.Fatalf(name+": %s run %s: %v", what, d.runID, err)
	}
	d.settle()
	return d.status
}

// readSteps reads the run's step files.
func (d *agentDriver) readSteps() {
	d.tb.Helper()
	steps, err := d.r.Steps(context.Background(), d.runID)
	if err != nil {
		d.tb.Fatalf(name+": steps of run %s: %v", d.runID, err)
	}
	d.steps = steps
}
