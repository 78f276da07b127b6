package run

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"go.opentelemetry.io/otel/trace"
)

// Causes that stop an execution, as context causes.
var (
	errCanceled   = errors.New("run: run canceled")
	errRunTimeout = errors.New("run: run timeout")
	errWriteLimit = errors.New("run: run deadline and finish grace passed")
)

// execution is one runner executing one run under its lease.
type execution struct {
	e     *executor
	agent *agentDef
	// flow is the run's own machine's, read from its status at the claim.
	flow    *flow
	w       *statusWriter
	epoch   int64
	resumed bool
	slotKey string
	slotVer storage.Version
	// records are the step files this execution knows, for the manifest.
	records map[int]lifecycle.StepRecord
	// files writes the step files and outputs, fenced by the lease's
	// epoch; made when the execution runs (the claim sets the epoch).
	files *stepFiles
	// lastProposals are the final step's, counted by the terminal write.
	lastProposals []string
	input         json.RawMessage
	inputKnown    bool
	// traceParent is the run's stored trace context, read by the claim.
	traceParent string
	// tenant is the run's tenant, read by the claim: its steps act for it.
	tenant string
	// counted is the status as the last counting write left it (count),
	// for the span of an execution that parked.
	counted *lifecycle.RunStatus

	mu     sync.Mutex
	cancel context.CancelCauseFunc
	// stopEarly is a stop asked for before the execution ran (between its
	// registration and its start): run applies it at once.
	stopEarly error
}

// outcome is how the steps of an execution ended.
type outcome struct {
	kind  outcomeKind
	err   error    // the failure, for failed; the cause, for stopped
	files []string // written under output/, for the manifest
	// parked is the status as the write that parked the run left it: what
	// the span says the run waits for, though an answer may land before
	// the span ends.
	parked *lifecycle.RunStatus
}

type outcomeKind int

const (
	done outcomeKind = iota
	parked
	failed
	canceled
	timedOut
	stopped // lease lost or shutdown: write nothing more
)

func (x *execution) stop(cause error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cancel != nil {
		x.cancel(cause)
	} else if x.stopEarly == nil {
		x.stopEarly = cause
	}
}

func (x *execution) run(ctx context.Context) {
	e := x.e
	defer e.life.done()
	ctx, end := activity.Enter(ctx, e.cfg.Clock) // its token, taken by startOrWait
	defer end()
	defer e.execs.unregister(x.w.runID)
	x.files = &stepFiles{store: e.store, now: e.now, log: e.log, owner: e.cfg.Owner, slug: x.agent.Slug, runID: x.w.runID,
		epoch: x.epoch, w: x.w, markers: map[int]storage.Version{}}
	// The execution continues the trace its submit stored, whichever
	// runner made the submit (a takeover's too): its spans, the steps' and
	// the jobs those enqueue are of the caller's trace.
	ctx = tracing.Continue(ctx, x.traceParent)
	ctx, span := e.tracer.Start(ctx, tracing.SpanRun, trace.SpanKindInternal)
	span.String(tracing.AttrRunID, x.w.runID)
	span.String(tracing.AttrAgent, x.agent.Slug)
	span.Int(tracing.AttrEpoch, x.epoch)
	span.Bool(tracing.AttrResumed, x.resumed)
	resumedFrom(span, x.w.snapshot())
	var out outcome
	defer func() { endRunSpan(span, out, x.w.snapshot()) }()
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x.mu.Lock()
	x.cancel = cancel
	if x.stopEarly != nil {
		cancel(x.stopEarly)
	}
	x.mu.Unlock()
	// Writes outlive a stop of the steps, so a timed-out or canceled run can
	// still record its end, but not for ever: the steps' writes (sctx) end
	// FinishGrace after the run's deadline, the finish (wctx) FinishGrace
	// after that. Until then a store outage is waited out; after it the
	// store's error stands (UPSTREAM_UNAVAILABLE). Each timer is armed by
	// the one before, so an execution keeps one timer at a time.
	wctx, wcancel := context.WithCancelCause(ctx)
	defer wcancel(nil)
	sctx, scancel := context.WithCancelCause(wctx)
	defer scancel(nil)
	var (
		timerMu sync.Mutex
		timer   clock.Timer
		over    bool
	)
	arm := func(d time.Duration, f func()) {
		timerMu.Lock()
		defer timerMu.Unlock()
		if !over {
			timer = e.cfg.Clock.AfterFunc(d, f)
		}
	}
	arm(e.cfg.RunTimeout, func() {
		cancel(errRunTimeout)
		arm(e.cfg.FinishGrace, func() {
			scancel(errWriteLimit)
			arm(e.cfg.FinishGrace, func() { wcancel(errWriteLimit) })
		})
	})
	defer func() {
		timerMu.Lock()
		over = true
		timer.Stop()
		timerMu.Unlock()
	}()
	if x.w.snapshot().CancelRequested {
		cancel(errCanceled)
	}
	out = x.runSteps(runCtx, sctx)
	if x.compensates(out) {
		// The phase has deadlines of its own, from its start; its end
		// is written under its write context.
		var p *compensationPhase
		out, p = x.compensate(ctx, out)
		defer p.end()
		wctx = p.wctx
	}
	x.finish(wctx, out)
}

// outcomeNames name the outcomes on a run's span.
var outcomeNames = [...]string{done: "done", parked: "parked", failed: "failed", canceled: "canceled", timedOut: "timed_out", stopped: "stopped"}

// endRunSpan ends an execution's span with its outcome; a failed run's
// span is marked failed, a parked one says what it waits for.
func endRunSpan(span tracing.Span, out outcome, doc lifecycle.RunStatus) {
	span.String(tracing.AttrOutcome, outcomeNames[out.kind])
	if out.parked != nil {
		doc = *out.parked
	}
	if out.kind == parked {
		switch {
		case doc.Status == string(machine.ApprovalAwaitingApproval) && doc.Approval != nil:
			span.WaitBegins(waitApproval, doc.Approval.Action)
		case doc.Status == string(machine.ApprovalWaitingExternal) && doc.External != nil:
			span.WaitBegins(waitExternal, doc.External.EventType)
		}
	}
	if out.kind == failed && out.err != nil {
		span.Fail(out.err.Error())
	}
	span.End(nil)
}

// The kinds of wait on a run's span.
const (
	waitApproval = "approval"
	waitExternal = "external_event"
)

// resumedFrom records on an execution's span the wait it resumes from:
// the run's last wait, when it was answered after the steps counted (a
// gate is after one step, and the steps after it have not all counted).
// A run span is per execution, so the wait sits between two spans of one
// trace; its events, timed at either end, show it.
func resumedFrom(span tracing.Span, doc lifecycle.RunStatus) {
	if a := doc.Approval; a != nil && a.DecidedAt != nil && a.AfterStep > 0 && a.AfterStep == doc.StepsCompleted {
		span.WaitEnded(waitApproval, a.Action, a.RequestedAt, *a.DecidedAt, a.DecidedBy)
	}
	if ev := doc.External; ev != nil && ev.ReceivedAt != nil && ev.AfterStep > 0 && ev.AfterStep == doc.StepsCompleted {
		span.WaitEnded(waitExternal, ev.EventType, ev.Since, *ev.ReceivedAt, ev.Source)
	}
}

// beat renews the lease (any owner write renews it; fence.Heartbeat
// schedules beats from the last renewal) and notices a cancel request or a
// takeover written by someone else. It returns false once the lease is lost.
func (x *execution) beat(ctx context.Context) bool {
	err := x.w.apply(ctx, bySystem(), func(context.Context, *lifecycle.RunStatus) error { return nil })
	switch {
	case errors.Is(err, lifecycle.ErrLeaseLost), errors.Is(err, lifecycle.ErrCorrupt):
		x.stop(err)
		return false
	case err != nil:
		if ctx.Err() == nil {
			x.e.log.LogAttrs(ctx, slog.LevelWarn, "heartbeat_failed", slog.String("runId", x.w.runID), slog.String("error", err.Error()))
		}
	case x.w.snapshot().CancelRequested:
		x.stop(errCanceled)
	}
	return true
}

// resumePlan says, for a run taken over from a lost runner, which steps to
// skip with their checkpointed output (docs/spec.md#recovery).
type resumePlan struct {
	skip   []bool
	cached []json.RawMessage
	counts int // steps the status must count before continuing
}

// plan reads the step files of a run that already made progress and decides
// per step: a completed resumable step is skipped with its cached output; a
// completed step that is not resumable is replayed when idempotent; the step
// a lost runner was in is replayed when idempotent, and run when it is not
// idempotent but provably never started (no start marker, see markStarted);
// anything else fails the run (RUN_RESUME_FAILED, or RUN_ORPHANED when there
// is no checkpoint at all).
func (x *execution) plan(ctx context.Context, doc lifecycle.RunStatus) (resumePlan, error) {
	steps := x.agent.Steps
	p := resumePlan{skip: make([]bool, len(steps)), cached: make([]json.RawMessage, len(steps))}
	if doc.StepsCompleted == 0 && !x.resumed {
		return p, nil
	}
	files, err := x.e.readSteps(ctx, doc.AgentSlug, doc.RunID)
	if err != nil {
		return p, err
	}
	done := map[int]lifecycle.StepRecord{}
	started := map[int]bool{} // a step file exists: the step may have run
	for _, f := range files {
		started[f.StepNumber] = true
		if f.Status == lifecycle.StepCompleted {
			done[f.StepNumber] = f
			x.records[f.StepNumber] = f
		}
	}
	if !x.resumed {
		// Resumed after a wait: every counted step completed, outputs cached.
		for i := 0; i < doc.StepsCompleted; i++ {
			p.skip[i], p.cached[i] = true, done[i+1].Output
		}
		p.counts = doc.StepsCompleted
		return p, nil
	}
	for i, s := range steps {
		cp, ok := done[i+1]
		switch {
		case ok && s.Resumable:
			p.skip[i], p.cached[i] = true, cp.Output
			if i+1 > p.counts && i == p.counts {
				p.counts = i + 1
			}
		case ok && s.Idempotent:
		case ok:
			return p, lifecycle.NewRunError(codes.RunResumeFailed, "step %s completed before the takeover but is neither resumable nor idempotent", s.Name)
		case s.Idempotent:
			return p, nil // the interrupted step replays; the rest run normally
		case !started[i+1]:
			// A step that is not idempotent gets its start marker before it
			// runs: without one it provably never started, so it runs now.
			return p, nil
		case len(done) == 0:
			return p, lifecycle.NewRunError(codes.RunOrphaned, "runner lost in step %s, which is not idempotent, with no checkpoint", s.Name)
		default:
			return p, lifecycle.NewRunError(codes.RunResumeFailed, "runner lost in step %s, which is not idempotent", s.Name)
		}
	}
	return p, nil
}

// execute runs the steps not yet done. runCtx carries the stops; ctx (the
// runner's) is used for the writes, so a timed-out or canceled run can
// still record its end.
func (x *execution) execute(runCtx, ctx context.Context) outcome {
	if x.agent.graph != nil {
		return executeGraph(runCtx, ctx, x)
	}
	steps := x.agent.Steps
	doc := x.w.snapshot()
	p, err := x.plan(ctx, doc)
	if err != nil {
		return outcome{kind: failed, err: err}
	}
	if p.counts > doc.StepsCompleted {
		// Steps whose files were written but not counted before the takeover.
		if err := x.count(ctx, p.counts, nil, nil); err != nil {
			return x.writeFailure(ctx, err)
		}
	}
	input, end := x.loadInput(ctx, doc)
	if end != nil {
		return *end
	}
	waits, err := x.e.loadWaits(ctx, doc)
	if err != nil {
		return x.countFailure(ctx, err)
	}
	outputs := p.cached
	var files []string
	for i, s := range steps {
		if p.skip[i] {
			continue
		}
		if cause := context.Cause(runCtx); cause != nil {
			return stoppedBy(cause)
		}
		in := StepInput{RunID: doc.RunID, AgentSlug: doc.AgentSlug, Step: i + 1, Input: input, Previous: outputs[:i], Outputs: byName(steps[:i], outputs)}
		waits.fill(&in)
		out, names, end := x.doStep(runCtx, ctx, i, s, in)
		if end != nil {
			return *end
		}
		files = append(files, names...)
		outputs[i] = out.Data
		if i == len(steps)-1 && out.Await == nil {
			x.lastProposals = out.Proposals
			return outcome{kind: done, files: files}
		}
		if context.Cause(runCtx) == errCanceled {
			return outcome{kind: canceled}
		}
		if err := x.count(ctx, i+1, out.Proposals, out.Await); err != nil {
			return x.countFailure(ctx, err)
		}
		if out.Await != nil {
			if x.w.snapshot().CancelRequested {
				return outcome{kind: canceled} // count did not park it: the cancel wins
			}
			return outcome{kind: parked, parked: x.counted}
		}
	}
	return outcome{kind: done, files: files}
}

// loadInput gives the run's input: the one submitted, or the one stored
// when this execution took the run over. end is set when the execution
// ends here.
func (x *execution) loadInput(ctx context.Context, doc lifecycle.RunStatus) ([]byte, *outcome) {
	if x.inputKnown {
		return x.input, nil
	}
	input := x.input
	inKey, err := layout.RunInputKey(doc.AgentSlug, doc.RunID)
	if err != nil {
		return nil, &outcome{kind: failed, err: err}
	}
	b, _, err := x.e.store.Get(ctx, inKey)
	if errors.Is(err, storage.ErrNotFound) && x.e.absent.Settle > 0 && x.e.mayHaveInput(ctx, doc) {
		// One not-found of a store that settles is no proof the run has
		// no input, and steps run without one cannot be undone: read
		// again Settle later (only a run whose active entry says it has
		// an input, or cannot be read, waits; a store that settles at
		// once, never).
		if err = activity.Sleep(ctx, x.e.cfg.Clock, x.e.absent.Settle); err == nil {
			b, _, err = x.e.store.Get(ctx, inKey)
		}
	}
	if err == nil {
		input = b
	} else if !errors.Is(err, storage.ErrNotFound) {
		end := x.writeFailure(ctx, err)
		return nil, &end
	}
	return input, nil
}

// countFailure is how the execution ends when counting a step failed: a
// lost lease, a corrupt record or the store's trouble is a write failure;
// any other error fails the run.
func (x *execution) countFailure(ctx context.Context, err error) outcome {
	if errors.Is(err, lifecycle.ErrLeaseLost) || errors.Is(err, lifecycle.ErrCorrupt) || errors.Is(err, storage.ErrUnavailable) ||
		errors.Is(err, context.Canceled) || storage.Transient(err) {
		return x.writeFailure(ctx, err)
	}
	return outcome{kind: failed, err: err}
}

func stoppedBy(cause error) outcome {
	switch cause {
	case errCanceled:
		return outcome{kind: canceled}
	case errRunTimeout:
		return outcome{kind: timedOut}
	}
	return outcome{kind: stopped, err: cause}
}

// writeFailure turns a failed write made under ctx into an outcome: a lost
// lease or a quarantined status stops the execution, and so does the
// runner's shutdown; a store error that outlasted the run's deadline (or
// one that is no outage at all) fails the run as UPSTREAM_UNAVAILABLE.
func (x *execution) writeFailure(ctx context.Context, err error) outcome {
	switch cause := context.Cause(ctx); {
	case errors.Is(err, lifecycle.ErrLeaseLost), errors.Is(err, lifecycle.ErrCorrupt):
		return outcome{kind: stopped, err: err}
	case ctx.Err() != nil && cause != errRunTimeout && cause != errWriteLimit:
		return outcome{kind: stopped, err: err} // shutdown
	}
	return outcome{kind: failed, err: &lifecycle.RunError{Code: codes.UpstreamUnavailable, Message: err.Error(), Err: err}}
}

// count writes the status that counts steps 1..n (one write: the step
// update, and the move to a wait when the step asked for one).
func (x *execution) count(ctx context.Context, n int, proposals []string, await *Await) error {
	f := x.flow
	e := x.e
	b := bySystem()
	switch {
	case await != nil && await.Approval != "":
		b.tc.Approval = &lifecycle.Approval{Action: await.Approval} // filled from the document written
	case await != nil && await.ExternalEvent != "":
		b.tc.External = &lifecycle.ExternalWait{EventType: await.ExternalEvent}
	}
	return x.w.apply(ctx, b, func(ctx context.Context, d *lifecycle.RunStatus) (err error) {
		defer func() {
			if err == nil {
				doc := *d
				x.counted = &doc // as written, if this try lands
			}
		}()
		if f.stepDone != "" {
			if err := f.fire(ctx, d, f.stepDone, lifecycle.ActorOrchestration); err != nil {
				return err
			}
		}
		if n > d.StepsCompleted {
			d.StepsCompleted = n
		}
		if n < len(x.agent.Steps) {
			d.CurrentStep = x.agent.Steps[n].Name
		}
		d.ProposalsCreated = appendNew(d.ProposalsCreated, proposals...)
		if await == nil {
			return nil
		}
		// A run that parks executes nothing: it names the step it last
		// executed until a claim resumes it with the next.
		d.CurrentStep = x.agent.Steps[n-1].Name
		if d.CancelRequested && f.cancel != "" {
			// An acknowledged cancel landed while the step ran: the run
			// does not park (nobody would move it on but an approval);
			// it stays executing and the execution ends it canceled.
			return nil
		}
		now := e.now()
		switch {
		case await.Approval != "" && f.awaitApproval != "":
			if err := f.fire(ctx, d, f.awaitApproval, lifecycle.ActorOrchestration); err != nil {
				return err
			}
			d.Approval = &lifecycle.Approval{Action: await.Approval, RequestedAt: now, RequestedBy: requestedBy(d), AfterStep: n}
		case await.ExternalEvent != "" && f.waitExternal != "":
			if err := f.fire(ctx, d, f.waitExternal, lifecycle.ActorOrchestration); err != nil {
				return err
			}
			timeout := await.Timeout
			if timeout <= 0 {
				timeout = e.cfg.ExternalTimeout
			}
			deadline := now.Add(timeout)
			d.External = &lifecycle.ExternalWait{EventType: await.ExternalEvent, Since: now, Deadline: &deadline, AfterStep: n}
		default:
			return &unsupportedError{Machine: f.machine, Operation: "await " + awaitKind(await)}
		}
		d.Lease = nil // a parked run holds no lease and no slot
		return nil
	})
}

func awaitKind(a *Await) string {
	if a.Approval != "" {
		return "approval"
	}
	return "external event"
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

// executor starts executions and gives them what they use: the settings
// of a run's steps and writes, the store, the slots and the run's end.
type executor struct {
	cfg      execConfig
	store    *storage.Store
	now      func() time.Time
	log      *slog.Logger
	tracer   tracing.Tracer
	units    *deadline.Units
	absent   *evidence.Absence
	cat      *catalog
	slots    *slots
	ender    *ender
	statuses *statuses
	execs    *executions
	life     *lifetime
	// readSteps reads a run's step files (the reads' own).
	readSteps func(ctx context.Context, slug, runID string) ([]lifecycle.StepRecord, error)
}

// execConfig is what of Config an execution reads: its clock, the
// timeouts and retries of its steps, its heartbeat, the lease owner that
// fences its writes, and where it reports.
type execConfig struct {
	Clock             clock.Clock
	Owner             string
	RunTimeout        time.Duration
	FinishGrace       time.Duration
	HeartbeatInterval time.Duration
	StepTimeout       time.Duration
	StepRetries       int
	RetryBackoff      time.Duration
	ExternalTimeout   time.Duration
	Metrics           Metrics
}

// prepare makes the execution of c in the slot taken at slotVer; it runs
// once claimed (start).
func (xr *executor) prepare(c candidate, slot string, slotVer storage.Version) *execution {
	return &execution{e: xr, agent: xr.cat.agents[c.slug], w: c.w, records: map[int]lifecycle.StepRecord{},
		input: c.input, inputKnown: c.inputKnown, slotKey: slot, slotVer: slotVer}
}

// start runs a claimed execution beside the loop, for as long as Run's
// context lives.
func (xr *executor) start(x *execution) {
	xr.life.add()
	go x.run(activity.Start(xr.life.context(), xr.cfg.Clock))
}

// mayHaveInput tells whether doc's run may have an input.json: false only
// when its active entry, written once by its submit before anything else,
// says it has none. Such a run need not wait for evidence that its input
// is missing.
func (xr *executor) mayHaveInput(ctx context.Context, doc lifecycle.RunStatus) bool {
	key, err := layout.RunActiveKey(doc.AgentSlug, doc.RunID)
	if err != nil {
		return true
	}
	raw, _, err := xr.store.Get(ctx, key)
	if err != nil {
		return true
	}
	var e activeEntry
	if json.Unmarshal(raw, &e) != nil || e.Pending == nil || e.Pending.RunID != doc.RunID {
		return true // written before entries carried the pending status: unknown
	}
	return e.Input
}
