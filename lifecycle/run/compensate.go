package run

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// Compensation (docs/spec.md#compensation): a run that ends canceled (or
// failed, when its agent asks) after steps that declare Compensate first
// moves to the compensating state, runs those steps' compensations in
// reverse order of completion through the step machinery (attempt
// timeout, retries, backoff, under the lease and its heartbeat), records
// each in status.json's compensation_log as it ends, and only then makes
// the terminal write, which carries the whole log.

// CompensateInput is what a step's Compensate is given: the step's own
// input and checkpointed output, and why the run is being undone.
type CompensateInput struct {
	RunID     string
	AgentSlug string
	// Step is the 1-based position of the step undone; StepName its name.
	Step     int
	StepName string
	// Attempt counts from 1, per run of the compensation.
	Attempt int
	// Input is the run's input; Output the step's checkpointed output
	// (StepOutput.Data).
	Input  json.RawMessage
	Output json.RawMessage
	// Reason is "canceled" or "failed".
	Reason string
}

// The reasons a compensation is given.
const (
	reasonCanceled = "canceled"
	reasonFailed   = "failed"
)

// The outcomes of a compensation in the log.
const (
	compensated        = "compensated"
	compensationFailed = "failed"
)

// defaultCompensateAction is the action a compensation_log entry names
// when its step names none.
const defaultCompensateAction = "compensate"

// compensates tells whether an agent has a completed step to undo among
// its first steps: the test of a run not executing, whose steps counted.
func (a *agentDef) compensates(steps int) bool {
	for i := 0; i < steps && i < len(a.Steps); i++ {
		if a.Steps[i].Compensate != nil {
			return true
		}
	}
	return false
}

// cancelOrCompensate is the cancel of a run no runner executes: it moves
// to compensating when it has completed steps to undo (a runner claims it
// there and ends it), else it ends canceled at once.
func cancelOrCompensate(ctx context.Context, f *flow, d *lifecycle.RunStatus, a *agentDef, actor lifecycle.Actor, en *ender) error {
	if f.compensate != "" && a != nil && a.compensates(d.StepsCompleted) {
		return f.fire(ctx, d, f.compensate, actor)
	}
	if err := f.fire(ctx, d, f.cancel, actor); err != nil {
		return err
	}
	en.finishFields(d, nil)
	return nil
}

// failOrCompensate is the failure of a run no runner executes (a reject,
// an external wait's deadline) by event: to compensating, its error
// written, when its agent compensates on failure and has completed steps
// to undo; else failed at once.
func failOrCompensate(ctx context.Context, f *flow, d *lifecycle.RunStatus, a *agentDef, actor lifecycle.Actor, event lifecycle.Event, runErr error, en *ender) error {
	if f.compensate != "" && a != nil && a.CompensateOnFailure && a.compensates(d.StepsCompleted) {
		if err := f.fire(ctx, d, f.compensate, actor); err != nil {
			return err
		}
		msg := runErrorText(runErr)
		d.Error = &msg
		return nil
	}
	if err := f.fire(ctx, d, event, actor); err != nil {
		return err
	}
	en.finishFields(d, runErr)
	return nil
}

// compensates tells whether the execution, ending with out, must undo
// completed steps first: always when its run is compensating already (a
// takeover), else when it was canceled (or failed, if the agent asks) and
// a completed step declares Compensate.
func (x *execution) compensates(out outcome) bool {
	f := x.flow
	doc := x.w.snapshot()
	switch {
	case f.compensating == "":
		return false
	case doc.Status == f.compensating:
		return true
	case out.kind == canceled, out.kind == failed && x.agent.CompensateOnFailure:
	case out.kind == timedOut && f.cancelRq != "" && doc.Status == f.cancelRq:
		// cancel_requested cannot time out: the run ends canceled, so
		// it is undone first.
	default:
		return false
	}
	if x.agent.compensates(doc.StepsCompleted) {
		return true
	}
	for n, rec := range x.records {
		if rec.Status == lifecycle.StepCompleted && n-1 < len(x.agent.Steps) && x.agent.Steps[n-1].Compensate != nil {
			return true
		}
	}
	return false
}

// resumedOutcome is the outcome of an execution that claimed a run found
// compensating: failed when the failure was recorded on the way in,
// canceled otherwise.
func resumedOutcome(doc lifecycle.RunStatus) outcome {
	if doc.Error != nil {
		return outcome{kind: failed}
	}
	return outcome{kind: canceled}
}

// compensationPhase holds the contexts of a compensation phase: the
// compensations run under cctx (RunTimeout from the phase's start, the
// lease lost or the runner stopping), the checkpoint and terminal writes
// under wctx (two FinishGrace longer), each timer on the runner's clock.
type compensationPhase struct {
	x                *execution
	cctx, wctx       context.Context
	ccancel, wcancel context.CancelCauseFunc
	timers           []clock.Timer
}

func newPhase(x *execution, base context.Context) *compensationPhase {
	cfg := x.e.cfg
	p := &compensationPhase{x: x}
	p.wctx, p.wcancel = context.WithCancelCause(base)
	p.cctx, p.ccancel = context.WithCancelCause(p.wctx)
	p.timers = append(p.timers,
		cfg.Clock.AfterFunc(cfg.RunTimeout, func() { p.ccancel(errRunTimeout) }),
		cfg.Clock.AfterFunc(cfg.RunTimeout+2*cfg.FinishGrace, func() { p.wcancel(errWriteLimit) }))
	return p
}

func (p *compensationPhase) end() {
	for _, t := range p.timers {
		t.Stop()
	}
	p.ccancel(nil)
	p.wcancel(nil)
}

// runSteps runs the steps under the execution's heartbeat, unless the run
// was claimed while compensating: then no step runs again.
func (x *execution) runSteps(runCtx, ctx context.Context) outcome {
	if doc := x.w.snapshot(); x.flow.compensating != "" && doc.Status == x.flow.compensating {
		return resumedOutcome(doc)
	}
	cfg := x.e.cfg
	stopBeat := fence.Heartbeat(runCtx, cfg.Clock, cfg.HeartbeatInterval, x.w.renewed, x.beat)
	defer stopBeat()
	return x.execute(runCtx, ctx)
}

// compensate runs the compensation phase of an execution that ended with
// out (or claimed a run found compensating) and gives the outcome the
// terminal write records, and the phase, whose write context the
// terminal write uses; its end is called once that write is done.
func (x *execution) compensate(base context.Context, out outcome) (outcome, *compensationPhase) {
	p := newPhase(x, base)
	stopBeat := fence.Heartbeat(p.cctx, x.e.cfg.Clock, x.e.cfg.HeartbeatInterval, x.w.renewed, func(ctx context.Context) bool {
		if !x.beat(ctx) {
			p.ccancel(lifecycle.ErrLeaseLost)
			return false
		}
		return true
	})
	res := p.all(out)
	stopBeat()
	res.files = out.files
	return res, p
}

// all moves the run to compensating (unless it is there) and runs every
// compensation not yet in its log.
func (p *compensationPhase) all(out outcome) outcome {
	x := p.x
	f := x.flow
	if x.w.snapshot().Status != f.compensating {
		err := x.w.apply(p.wctx, bySystem(), func(ctx context.Context, d *lifecycle.RunStatus) error {
			if err := f.fire(ctx, d, f.compensate, lifecycle.ActorOrchestration); err != nil {
				return err
			}
			if out.kind == failed {
				msg := runErrorText(out.err)
				d.Error = &msg // the end is decided: a takeover ends the run failed with it
			}
			return nil
		})
		if err != nil {
			return x.writeFailure(p.wctx, err)
		}
	}
	doc := x.w.snapshot()
	end := resumedOutcome(doc)
	reason := reasonCanceled
	if end.kind == failed {
		reason = reasonFailed
	}
	todo, err := p.todo(doc)
	if err != nil {
		return x.writeFailure(p.wctx, err)
	}
	input, stop := x.loadInput(p.wctx, doc)
	if stop != nil {
		return *stop
	}
	x.e.log.LogAttrs(p.wctx, slog.LevelInfo, "compensation_started", slog.String("runId", doc.RunID),
		slog.String("reason", reason), slog.Int("compensations", len(todo)))
	for _, rec := range todo {
		entry, stop := p.step(rec, CompensateInput{RunID: doc.RunID, AgentSlug: doc.AgentSlug, Step: rec.StepNumber,
			StepName: rec.StepName, Input: input, Output: rec.Output, Reason: reason})
		if stop != nil {
			return *stop
		}
		if err := p.checkpoint(entry); err != nil {
			return x.writeFailure(p.wctx, err)
		}
	}
	return end
}

// todo reads the run's step files and gives the completed steps with a
// Compensate not yet in the log, the last completed first (by finish
// time, then position: parallel branches are undone in reverse of how
// they ended).
func (p *compensationPhase) todo(doc lifecycle.RunStatus) ([]lifecycle.StepRecord, error) {
	x := p.x
	files, err := x.e.readSteps(p.wctx, doc.AgentSlug, doc.RunID)
	if err != nil {
		return nil, err
	}
	logged := map[int]bool{}
	for _, e := range doc.CompensationLog {
		logged[e.StepNumber] = true
	}
	var todo []lifecycle.StepRecord
	for _, rec := range files {
		if rec.Status != lifecycle.StepCompleted {
			continue
		}
		x.records[rec.StepNumber] = rec // the manifest lists them
		s, ok := x.agent.step(rec.StepNumber, rec.StepName)
		if ok && s.Compensate != nil && !logged[rec.StepNumber] {
			todo = append(todo, rec)
		}
	}
	slices.SortFunc(todo, func(a, b lifecycle.StepRecord) int {
		if c := finishedAt(b).Compare(finishedAt(a)); c != 0 {
			return c
		}
		return cmp.Compare(b.StepNumber, a.StepNumber)
	})
	return todo, nil
}

func finishedAt(r lifecycle.StepRecord) time.Time {
	if r.FinishedAt == nil {
		return time.Time{}
	}
	return *r.FinishedAt
}

// step is the agent's step at position n (1-based) when it is still
// named name: a step file of an older configuration is not undone by
// another step's code.
func (a *agentDef) step(n int, name string) (Step, bool) {
	if n < 1 || n > len(a.Steps) || a.Steps[n-1].Name != name {
		return Step{}, false
	}
	return a.Steps[n-1], true
}

// step runs the compensation of one completed step as a step: its
// attempts under the step's timeout with the run's retries and backoff
// (runStep). stop is set when the phase must end without a record: the
// lease lost or the runner stopping (the next owner runs the compensation
// again: at least once).
func (p *compensationPhase) step(rec lifecycle.StepRecord, in CompensateInput) (lifecycle.CompensationEntry, *outcome) {
	x := p.x
	s, _ := x.agent.step(rec.StepNumber, rec.StepName)
	entry := lifecycle.CompensationEntry{Step: rec.StepName, StepNumber: rec.StepNumber,
		Action: cmp.Or(s.CompensateAction, defaultCompensateAction), StartedAt: x.e.now()}
	if context.Cause(p.cctx) == errRunTimeout {
		// The phase's deadline passed: the rest are recorded, not run.
		entry.EndedAt, entry.Outcome = entry.StartedAt, compensationFailed
		entry.Error = codes.AgentTimeout + ": compensation phase exceeded " + seconds(x.e.cfg.RunTimeout)
		return entry, nil
	}
	if err := x.w.confirmLease(p.wctx); err != nil {
		end := x.writeFailure(p.wctx, err)
		return entry, &end
	}
	undo := Step{Name: rec.StepName, Timeout: s.Timeout, Run: func(ctx context.Context, si StepInput) (StepOutput, error) {
		ci := in
		ci.Attempt = si.Attempt
		return StepOutput{}, s.Compensate(ctx, ci)
	}}
	_, attempts, err := x.runStep(p.cctx, undo, StepInput{RunID: in.RunID, AgentSlug: in.AgentSlug, Step: rec.StepNumber})
	cause := context.Cause(p.cctx)
	if err != nil && cause != nil && cause != errRunTimeout {
		return entry, &outcome{kind: stopped, err: cause}
	}
	entry.EndedAt, entry.Attempts, entry.Outcome = x.e.now(), attempts, compensated
	if err != nil {
		if cause == errRunTimeout {
			err = lifecycle.NewRunError(codes.AgentTimeout, "compensation of %s stopped at the phase's limit %s", rec.StepName, seconds(x.e.cfg.RunTimeout))
		}
		entry.Outcome, entry.Error = compensationFailed, runErrorText(err)
		x.e.log.LogAttrs(p.wctx, slog.LevelError, "compensation_failed", slog.String("runId", in.RunID),
			slog.String("step", rec.StepName), slog.String("error", entry.Error))
	}
	return entry, nil
}

// checkpoint records one ended compensation in status.json, fenced by the
// lease like every status write: a crash after it does not run the
// compensation again.
func (p *compensationPhase) checkpoint(entry lifecycle.CompensationEntry) error {
	return p.x.w.apply(p.wctx, bySystem(), func(_ context.Context, d *lifecycle.RunStatus) error {
		for _, e := range d.CompensationLog {
			if e.StepNumber == entry.StepNumber {
				return nil // recorded by a write whose answer was lost
			}
		}
		d.CompensationLog = append(d.CompensationLog, entry)
		return nil
	})
}

// runErrorText is an error as a run's error field says it: "CODE:
// message", INTERNAL_ERROR when it carries no code.
func runErrorText(err error) string {
	if err == nil {
		return codes.InternalError + ": run failed"
	}
	var re *lifecycle.RunError
	if errors.As(err, &re) {
		return err.Error()
	}
	return fmt.Sprintf("%s: %s", codes.InternalError, err.Error())
}
