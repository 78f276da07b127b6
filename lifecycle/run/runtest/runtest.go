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
	"github.com/runconveyor/conveyor/internal/testdrive"
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
	err      error
	out      run.StepOutput
	// since is the clock's timer sequence after which a backoff timer is
	// the retry's: when the attempt returned, or when the clock was moved
	// to its deadline (the Runner may time it out before it returns).
	since         uint64
	movedDeadline bool
	movedBackoff  bool
}

type driver struct {
	tb     testing.TB
	clk    *testdrive.Clock
	sig    testdrive.Signal
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

// wrap makes step i report its attempts to the driver.
func (d *driver) wrap(i int, s run.Step) run.Step {
	orig := s.Run
	s.Run = func(ctx context.Context, in run.StepInput) (out run.StepOutput, err error) {
		a := &attempt{step: i, n: in.Attempt}
		d.mu.Lock()
		d.attempts = append(d.attempts, a)
		d.mu.Unlock()
		d.sig.Kick()
		ended := false
		defer func() {
			if !ended { // a panic: the Runner records it
				d.end(a, run.StepOutput{}, fmt.Errorf("panic"))
			}
		}()
		ctx = testdrive.WithHang(ctx, func() {
			d.mu.Lock()
			a.hung = true
			d.mu.Unlock()
			d.sig.Kick()
		})
		out, err = orig(ctx, in)
		ended = true
		d.end(a, out, err)
		return out, err
	}
	return s
}

func (d *driver) end(a *attempt, out run.StepOutput, err error) {
	d.mu.Lock()
	a.returned, a.out, a.err = true, out, err
	if !a.movedDeadline {
		a.since = d.clk.Seq()
	}
	d.mu.Unlock()
	d.sig.Kick()
}

// move moves the fake clock when the Runner waits on it: to the deadline
// of an attempt that waits in Hang, and to the end of the backoff after a
// failed attempt. Each attempt moves it at most once for each; what the move
// fires wakes the driver again.
func (d *driver) move() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.attempts) == 0 {
		return false
	}
	a := d.attempts[len(d.attempts)-1]
	switch {
	case a.hung && !a.returned && !a.movedDeadline:
		a.since = d.clk.Seq()
		a.movedDeadline = true
	case (a.movedDeadline || a.returned && a.err != nil) && !a.movedBackoff && d.clk.Waiting(a.since):
		a.movedBackoff = true
	default:
		return false
	}
	_, ok := d.clk.AdvanceToNext()
	return ok
}

// stuck describes what the driver waited for in vain.
func (d *driver) stuck(st run.Status) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.attempts) > 0 {
		a := d.attempts[len(d.attempts)-1]
		if !a.returned && !a.hung {
			return fmt.Sprintf("attempt %d of step %d has not returned after %v of real time: a step that should hang in a test must wait with runtest.Hang(ctx) so the fake clock can move to its deadline (run %s is %s)",
				a.n, a.step+1, stall, st.RunID, st.Status)
		}
	}
	return fmt.Sprintf("run %s is %s and nothing happened for %v of real time", st.RunID, st.Status, stall)
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
	sig := testdrive.NewSignal()
	d := &driver{tb: tb, clk: testdrive.NewClock(sig), sig: sig}
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
	cfg.Store = testdrive.Store{Store: memstore.New(), Sig: sig}
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
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(stop)

	res, err := r.Submit(ctx, run.SubmitRequest{AgentSlug: agent.Slug, Input: input})
	if err != nil {
		tb.Fatalf("runtest: submit: %v", err)
	}
	watchdog := time.NewTimer(stall)
	defer watchdog.Stop()
	for {
		st, err := r.Status(ctx, res.RunID)
		if err != nil {
			tb.Fatalf("runtest: status of run %s: %v", res.RunID, err)
		}
		if settled(st) {
			d.status = st
			break
		}
		if d.move() {
			watchdog.Reset(stall)
			continue
		}
		select {
		case <-sig:
			watchdog.Reset(stall)
		case <-watchdog.C:
			tb.Fatalf("runtest: %s", d.stuck(st))
		}
	}
	stop()
	d.steps, err = r.Steps(context.Background(), res.RunID)
	if err != nil {
		tb.Fatalf("runtest: steps of run %s: %v", res.RunID, err)
	}
	return d
}
