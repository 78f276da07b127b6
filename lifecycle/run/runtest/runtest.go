// Package runtest tests your own steps and agents under the SDK's real
// Runner, in milliseconds: in the spirit of River's rivertest.
//
// RunStep and RunAgent run a run through a run.Runner on a memstore with a
// fake clock (starting 2026-01-01T00:00:00Z) and return when the run ends
// or parks. The step timeouts, retries and backoff are the Runner's own
// (run.Config's defaults: 120 s per attempt, 3 retries after 1 s, 2 s and
// 4 s, 600 s per run; an Option changes them), and they take no real time:
// the fake clock moves only while the Runner waits, to the next deadline
// it waits for. So a step that hangs four times is timed out four times,
// its run failing AGENT_TIMEOUT after 487 s of fake time, within a few
// milliseconds of the test's.
//
// Time moves while the Runner waits on a retry backoff, and while a step
// waits in Hang. A step of yours that should hang in a test (a fake
// upstream that never answers) waits with Hang(ctx), which, outside a
// helper of this package, is just <-ctx.Done(). A step that blocks any
// other way for 10 s of real time fails the test, saying which attempt.
package runtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/testdrive"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// Option changes the run.Config the helpers build the Runner from, e.g.
// its StepTimeout, StepRetries, RetryBackoff or RunTimeout. The helpers
// then set Store (a memstore), Clock (their fake clock), Owner and Node, a
// Logger that discards unless one is given, and push PollInterval,
// HeartbeatInterval, ParkedPollInterval and LeaseDuration out of the
// test's way.
type Option func(*run.Config)

// stall is how long, in real time, the driver waits for something to
// happen before it fails the test.
var stall = 10 * time.Second

// RunStep runs step as the one step of an agent through the real Runner,
// the run's input being input (nil for none), and returns what the step's
// last attempt returned and the run's final status.json (completed or
// failed; or parked, when the step's output awaits an approval or an
// external event). An empty step Name means "step". The test fails when
// the run cannot be submitted or does not end.
func RunStep(tb testing.TB, step run.Step, input json.RawMessage, opts ...Option) (run.StepOutput, run.Status) {
	tb.Helper()
	if step.Name == "" {
		step.Name = "step"
	}
	agent := run.Agent{Slug: "runtest", Steps: []run.Step{step}}
	d := drive(tb, agent, input, opts)
	return d.lastOutput(), d.status
}

// RunAgent runs one run of agent through the real Runner, the run's input
// being input (nil for none), and returns its final status.json and its
// step files in step order. The test fails when the agent is refused, or
// the run cannot be submitted or does not end.
func RunAgent(tb testing.TB, agent run.Agent, input json.RawMessage, opts ...Option) (run.Status, []run.StepRecord) {
	tb.Helper()
	d := drive(tb, agent, input, opts)
	return d.status, d.steps
}

// Hang waits until ctx is done and returns ctx.Err(). In a step run by
// RunStep or RunAgent it also tells the helper that the attempt now waits
// for its deadline, so the fake clock moves to it: write a fake upstream
// that never answers as `return runtest.Hang(ctx)`.
func Hang(ctx context.Context) error { return testdrive.Hang(ctx) }

// attempt is one call of a step.
type attempt struct {
	step, n  int
	hung     bool
	returned bool
	out      run.StepOutput
}

type driver struct {
	tb     testing.TB
	clk    *testdrive.Clock
	status run.Status
	steps  []run.StepRecord

	mu       sync.Mutex
	attempts []*attempt
}

func (d *driver) lastOutput() run.StepOutput {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.attempts) == 0 {
		return run.StepOutput{}
	}
	return d.attempts[len(d.attempts)-1].out
}

// wrap makes step i report its attempts to the driver, for its messages.
func (d *driver) wrap(i int, s run.Step) run.Step {
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
		ctx = testdrive.WithHang(ctx, func() {
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
func (d *driver) stuck(idle bool, runID string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.attempts) > 0 {
		a := d.attempts[len(d.attempts)-1]
		if !a.returned && !a.hung {
			return fmt.Sprintf("attempt %d of step %d has not returned after %v of real time: a step that should hang in a test must wait with runtest.Hang(ctx) so the fake clock can move to its deadline (run %s)",
				a.n, a.step+1, stall, runID)
		}
	}
	if idle {
		return fmt.Sprintf("run %s has not ended and the Runner waits for nothing that can happen", runID)
	}
	return ""
}

func settled(st run.Status) bool {
	switch st.Status {
	case "completed", "failed", "succeeded", "canceled", "cancelled", "timeout":
		return true
	case "awaiting_approval", "waiting_external":
		return st.Lease == nil
	}
	return false
}

func drive(tb testing.TB, agent run.Agent, input json.RawMessage, opts []Option) *driver {
	tb.Helper()
	d := &driver{tb: tb, clk: testdrive.NewClock()}
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
	cfg.Owner, cfg.Node = "runtest", "runtest"
	cfg.PollInterval = testdrive.Far
	cfg.ParkedPollInterval = testdrive.Far
	cfg.HeartbeatInterval = testdrive.Far
	cfg.LeaseDuration = 2 * testdrive.Far
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r, err := run.NewRunner(cfg, agent)
	if err != nil {
		tb.Fatalf("runtest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// Started busy: the Runner counts as working from here, not from when
	// its goroutine gets to run.
	rctx := clock.Start(ctx, d.clk)
	go func() {
		defer close(done)
		_ = r.Run(rctx)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(stop)

	res, err := r.Submit(ctx, run.SubmitRequest{AgentSlug: agent.Slug, Input: input})
	if err != nil {
		tb.Fatalf("runtest: submit: %v", err)
	}
	var (
		st   run.Status
		serr error
	)
	failed := ""
	d.clk.Drive(stall, func() bool {
		st, serr = r.Status(ctx, res.RunID)
		return serr != nil || settled(st)
	}, nil, func(idle bool) string { return d.stuck(idle, res.RunID) }, func(msg string) {
		if msg == "" {
			msg = fmt.Sprintf("run %s is %s and nothing happened for %v of real time", res.RunID, st.Status, stall)
		}
		failed = msg
	})
	if failed != "" {
		tb.Fatalf("runtest: %s", failed)
	}
	if serr != nil {
		tb.Fatalf("runtest: status of run %s: %v", res.RunID, serr)
	}
	d.status = st
	stop()
	d.steps, err = r.Steps(context.Background(), res.RunID)
	if err != nil {
		tb.Fatalf("runtest: steps of run %s: %v", res.RunID, err)
	}
	return d
}
