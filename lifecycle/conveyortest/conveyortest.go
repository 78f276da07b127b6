// Package conveyortest tests your own agents' steps and job handlers under
// the SDK's real engines, in milliseconds: in the spirit of River's
// rivertest.
//
// Each helper builds its engine on a memstore with a fake clock (starting
// 2026-01-01T00:00:00Z), runs your code through it to its end, and returns
// what the engine wrote:
//
//   - RunStep and RunAgent submit a run to a run.Runner and return when the
//     run ends or parks: the run's status.json, its step files, and what a
//     step's last attempt returned. The step timeouts, retries and backoff
//     are the Runner's own (run.Config's defaults: 120 s per attempt, 3
//     retries after 1 s, 2 s and 4 s, 600 s per run; a RunnerOption
//     changes them).
//   - StartAgent does the same and returns the run still served by its
//     Runner: AgentRun's Approve, Reject, Deliver and Cancel answer it as
//     an owner would, payloads included, and drive it on to its next
//     rest.
//   - RunJob enqueues one job in a jobqueue.Queue and runs it with your
//     Handler (a Typed one, or the NLM pipeline's Handlers) through
//     jobqueue.Claim, again after each backoff, until it is COMPLETE or
//     DEAD, and returns the job and its artifact. The handler timeouts (120
//     s), attempts (3) and backoff (15 s, 30 s, 60 s) are the Queue's own,
//     or a QueueOption's.
//   - RequireJob asserts the state of a job in any Queue, e.g. one your own
//     code enqueued into.
//
// The timeouts and backoff take no real time: the fake clock moves only
// while the engine waits, to the next deadline it waits for. So a step that
// hangs four times is timed out four times, its run failing AGENT_TIMEOUT
// after 487 s of fake time, within a few milliseconds of the test's.
//
// Time moves while the engine waits on a backoff, and while your code
// waits in Hang. A step or handler of yours that should hang in a test (a
// fake upstream that never answers) waits with Hang(ctx), which, outside a
// helper of this package, is just <-ctx.Done(). Code that blocks any other
// way for 10 s of real time fails the test, saying which attempt.
package conveyortest

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
)

// name is the package's: the prefix of its failure messages, and the
// owner, node and worker the helpers run your code under.
const name = "conveyortest"

// stall is how long, in real time, a helper waits for something to happen
// before it fails the test.
var stall = 10 * time.Second

// Hang waits until ctx is done and returns ctx.Err(). In a step or handler
// run by a helper of this package it also tells the helper that the call
// now waits for its deadline, so the fake clock moves to it: write a fake
// upstream that never answers as `return run.StepOutput{},
// conveyortest.Hang(ctx)` in a step, or `return lifecycle.JobOutput{},
// conveyortest.Hang(ctx)` in a handler.
func Hang(ctx context.Context) error {
	if f, ok := ctx.Value(hangKey{}).(func()); ok {
		f()
	}
	return activity.Hang(ctx)
}

// discard is the logger a helper's engine gets when its option sets none.
func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
