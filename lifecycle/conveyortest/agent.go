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
	return d.lastOutput(), d.status
}

// RunAgent runs one run of agent through the real Runner, the run's input
// being input (nil for none), and returns its final status.json and its
// step files in step order. The test fails when the agent is refused, or
// the run cannot be submitted or does not end.
func RunAgent(tb testing.TB, agent run.Agent, input json.RawMessage, opts ...RunnerOption) (lifecycle.RunStatus, []lifecycle.StepRecord) {
	tb.Helper()
	d := runAgent(tb, agent, input, opts)
	return d.status, d.steps
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

// runAgent runs one run of agent to its end or until it parks.
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
	stop := func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(stop)

	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: agent.Slug, Input: input})
	if err != nil {
		tb.Fatalf(name+": submit: %v", err)
	}
	var (
		st   lifecycle.RunStatus
		serr error
	)
	failed := ""
	d.clk.drive(stall, func() bool {
		st, serr = r.Status(ctx, res.RunID)
		return serr != nil || settled(st)
	}, nil, func(idle bool) string { return d.stuck(idle, res.RunID) }, func(msg string) {
		if msg == "" {
			msg = fmt.Sprintf("run %s is %s and nothing happened for %v of real time", res.RunID, st.Status, stall)
		}
		failed = msg
	})
	if failed != "" {
		tb.Fatalf(name+": %s", failed)
	}
	if serr != nil {
		tb.Fatalf(name+": status of run %s: %v", res.RunID, serr)
	}
	d.status = st
	stop()
	d.steps, err = r.Steps(context.Background(), res.RunID)
	if err != nil {
		tb.Fatalf(name+": steps of run %s: %v", res.RunID, err)
	}
	return d
}
