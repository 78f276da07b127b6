package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// Causes that stop an execution, as context causes.
var (
	errCanceled   = errors.New("run: run canceled")
	errRunTimeout = errors.New("run: run timeout")
	errWriteLimit = errors.New("run: run deadline and finish grace passed")
)

// execution is one runner executing one run under its lease.
type execution struct {
	r     *Runner
	agent *agentDef
	// flow is the run's own machine's, read from its status at the claim.
	flow    *flow
	w       *statusWriter
	epoch   int64
	resumed bool
	slotKey string
	slotVer storage.Version
	// records are the step files this execution knows, for the manifest.
	records map[int]StepRecord
	// markers are the versions of the start markers this execution wrote,
	// by step number (see markStarted).
	markers map[int]storage.Version
	// lastProposals are the final step's, counted by the terminal write.
	lastProposals []string
	input         json.RawMessage
	inputKnown    bool

	mu     sync.Mutex
	cancel context.CancelCauseFunc
}

// outcome is how the steps of an execution ended.
type outcome struct {
	kind  outcomeKind
	err   error    // the failure, for failed; the cause, for stopped
	files []string // written under output/, for the manifest
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
	}
}

func (x *execution) run(ctx context.Context) {
	r := x.r
	defer r.wg.Done()
	ctx, end := clock.Enter(ctx, r.cfg.Clock) // its token, taken by startOrWait
	defer end()
	defer func() {
		r.mu.Lock()
		delete(r.executing, x.w.runID)
		c, again := r.rehand[x.w.runID]
		delete(r.rehand, x.w.runID)
		r.mu.Unlock()
		if again {
			r.hand(c)
		}
	}()
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x.mu.Lock()
	x.cancel = cancel
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
			timer = r.cfg.Clock.AfterFunc(d, f)
		}
	}
	arm(r.cfg.RunTimeout, func() {
		cancel(errRunTimeout)
		arm(r.cfg.FinishGrace, func() {
			scancel(errWriteLimit)
			arm(r.cfg.FinishGrace, func() { wcancel(errWriteLimit) })
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
	stopBeat := core.Heartbeat(runCtx, r.cfg.Clock, r.cfg.HeartbeatInterval, x.w.renewed, x.beat)
	out := x.execute(runCtx, sctx)
	stopBeat()
	x.finish(wctx, out)
}

// beat renews the lease (any owner write renews it; core.Heartbeat
// schedules beats from the last renewal) and notices a cancel request or a
// takeover written by someone else. It returns false once the lease is lost.
func (x *execution) beat(ctx context.Context) bool {
	err := x.w.apply(ctx, bySystem(), func(context.Context, *Status) error { return nil })
	switch {
	case errors.Is(err, records.ErrLeaseLost), errors.Is(err, records.ErrCorrupt):
		x.stop(err)
		return false
	case err != nil:
		if ctx.Err() == nil {
			x.r.log.LogAttrs(ctx, slog.LevelWarn, "heartbeat_failed", slog.String("runId", x.w.runID), slog.String("error", err.Error()))
		}
	case x.w.snapshot().CancelRequested:
		x.stop(errCanceled)
	}
	return true
}

// resumePlan says, for a run taken over from a lost runner, which steps to
// skip with their checkpointed output (seed 004 §5.3).
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
func (x *execution) plan(ctx context.Context, doc Status) (resumePlan, error) {
	steps := x.agent.Steps
	p := resumePlan{skip: make([]bool, len(steps)), cached: make([]json.RawMessage, len(steps))}
	if doc.StepsCompleted == 0 && !x.resumed {
		return p, nil
	}
	files, err := x.r.readSteps(ctx, doc.AgentSlug, doc.RunID)
	if err != nil {
		return p, err
	}
	done := map[int]StepRecord{}
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
	outputs := p.cached
	var files []string
	for i, s := range steps {
		if p.skip[i] {
			continue
		}
		if cause := context.Cause(runCtx); cause != nil {
			return x.stopped(cause)
		}
		in := StepInput{RunID: doc.RunID, AgentSlug: doc.AgentSlug, Step: i + 1, Input: input, Previous: outputs[:i]}
		out, end := x.doStep(runCtx, ctx, i, s, in)
		if end != nil {
			return *end
		}
		names, err := x.writeFiles(ctx, out.Files)
		if err != nil {
			return x.writeFailure(ctx, err)
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
			return outcome{kind: parked}
		}
	}
	return outcome{kind: done, files: files}
}

// loadInput gives the run's input: the one submitted, or the one stored
// when this execution took the run over. end is set when the execution
// ends here.
func (x *execution) loadInput(ctx context.Context, doc Status) ([]byte, *outcome) {
	if x.inputKnown {
		return x.input, nil
	}
	input := x.input
	inKey, err := layout.RunInputKey(doc.AgentSlug, doc.RunID)
	if err != nil {
		return nil, &outcome{kind: failed, err: err}
	}
	if b, _, err := x.r.store.Get(ctx, inKey); err == nil {
		input = b
	} else if !errors.Is(err, storage.ErrNotFound) {
		end := x.writeFailure(ctx, err)
		return nil, &end
	}
	return input, nil
}

// doStep runs step i (number i+1) and records how it went. end is set when
// the execution ends here: stopped, the step failed, or a write failed.
func (x *execution) doStep(runCtx, ctx context.Context, i int, s Step, in StepInput) (StepOutput, *outcome) {
	r := x.r
	if !s.Idempotent {
		if err := x.markStarted(ctx, i); err != nil {
			end := x.startFailure(ctx, err)
			return StepOutput{}, &end
		}
	}
	started := r.now()
	out, attempts, stepErr := x.runStep(runCtx, s, in)
	if stepErr != nil && isStop(runCtx) && !isTimeout(runCtx) && context.Cause(runCtx) != errCanceled {
		end := x.stopped(context.Cause(runCtx))
		return out, &end
	}
	if stepErr != nil {
		stepErr = stoppedStepError(runCtx, s, stepErr)
	}
	rec, err := x.stepRecord(i, started, out, attempts, stepErr)
	if err != nil {
		return out, &outcome{kind: failed, err: err}
	}
	if err := x.writeStep(ctx, rec); err != nil {
		end := x.writeFailure(ctx, err)
		return out, &end
	}
	if m, ok := r.cfg.Metrics.(stepMetrics); ok {
		m.StepFinished(in.AgentSlug, s.Name, string(rec.Status), rec.FinishedAt.Sub(*rec.StartedAt))
	}
	x.records[rec.StepNumber] = rec
	if stepErr != nil {
		end := stepFailure(runCtx, stepErr)
		return out, &end
	}
	return out, nil
}

// startFailure is how the execution ends when marking a step started
// failed: a run error fails the run as it is; any other is a write failure.
func (x *execution) startFailure(ctx context.Context, err error) outcome {
	var re *lifecycle.RunError
	if errors.As(err, &re) {
		return outcome{kind: failed, err: err}
	}
	return x.writeFailure(ctx, err)
}

// stepFailure is how the execution ends after a failed step: canceled or
// timed out when a stop cut it, failed otherwise.
func stepFailure(runCtx context.Context, stepErr error) outcome {
	switch context.Cause(runCtx) {
	case errCanceled:
		return outcome{kind: canceled}
	case errRunTimeout:
		return outcome{kind: timedOut}
	}
	return outcome{kind: failed, err: stepErr}
}

// countFailure is how the execution ends when counting a step failed: a
// lost lease, a corrupt record or the store's trouble is a write failure;
// any other error fails the run.
func (x *execution) countFailure(ctx context.Context, err error) outcome {
	if errors.Is(err, records.ErrLeaseLost) || errors.Is(err, records.ErrCorrupt) || errors.Is(err, storage.ErrUnavailable) ||
		errors.Is(err, context.Canceled) || storage.Transient(err) {
		return x.writeFailure(ctx, err)
	}
	return outcome{kind: failed, err: err}
}

// stoppedStepError gives the error of a step that a cancel or the run's
// timeout stopped the code of that stop, whatever the step returned: a
// canceled step is recorded CANCELED, not INTERNAL_ERROR.
func stoppedStepError(runCtx context.Context, s Step, err error) error {
	switch context.Cause(runCtx) {
	case errCanceled:
		return &lifecycle.RunError{Code: codes.Canceled, Message: fmt.Sprintf("step %s canceled", s.Name), Permanent: true, Err: err}
	case errRunTimeout:
		return &lifecycle.RunError{Code: codes.AgentTimeout, Message: fmt.Sprintf("step %s stopped at the run timeout", s.Name), Permanent: true, Err: err}
	}
	return err
}

func isStop(ctx context.Context) bool    { return context.Cause(ctx) != nil }
func isTimeout(ctx context.Context) bool { return context.Cause(ctx) == errRunTimeout }

func (x *execution) stopped(cause error) outcome {
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
	case errors.Is(err, records.ErrLeaseLost), errors.Is(err, records.ErrCorrupt):
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
	r := x.r
	b := bySystem()
	switch {
	case await != nil && await.Approval != "":
		b.tc.Approval = &lifecycle.Approval{Action: await.Approval} // filled from the document written
	case await != nil && await.ExternalEvent != "":
		b.tc.External = &lifecycle.ExternalWait{EventType: await.ExternalEvent}
	}
	return x.w.apply(ctx, b, func(ctx context.Context, d *Status) error {
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
		if d.CancelRequested && f.cancel != "" {
			// An acknowledged cancel landed while the step ran: the run
			// does not park (nobody would move it on but an approval);
			// it stays executing and the execution ends it canceled.
			return nil
		}
		now := r.now()
		switch {
		case await.Approval != "" && f.awaitApproval != "":
			if err := f.fire(ctx, d, f.awaitApproval, lifecycle.ActorOrchestration); err != nil {
				return err
			}
			d.Approval = &lifecycle.Approval{Action: await.Approval, RequestedAt: now}
		case await.ExternalEvent != "" && f.waitExternal != "":
			if err := f.fire(ctx, d, f.waitExternal, lifecycle.ActorOrchestration); err != nil {
				return err
			}
			timeout := await.Timeout
			if timeout <= 0 {
				timeout = r.cfg.ExternalTimeout
			}
			deadline := now.Add(timeout)
			d.External = &lifecycle.ExternalWait{EventType: await.ExternalEvent, Since: now, Deadline: &deadline}
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

// runStep runs one step with its per-attempt timeout and the retry schedule
// (StepRetries more attempts, RetryBackoff doubling), waiting on the
// runner's clock. It returns the output, the attempts made and the error of
// the last attempt, with a seed code.
func (x *execution) runStep(ctx context.Context, s Step, in StepInput) (StepOutput, int, error) {
	r := x.r
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = r.cfg.StepTimeout
	}
	exp := &backoff.ExponentialBackOff{
		InitialInterval:     r.cfg.RetryBackoff,
		RandomizationFactor: 0, // seed 000 §5.1: exactly 1 s, 2 s, 4 s
		Multiplier:          2,
		MaxInterval:         time.Duration(1<<62 - 1),
		Stop:                backoff.Stop,
		Clock:               r.cfg.Clock,
	}
	exp.Reset()
	policy := backoff.WithMaxRetries(exp, uint64(r.cfg.StepRetries))
	var out StepOutput
	attempts := 0
	op := func() error {
		attempts++
		in.Attempt = attempts
		o, err := x.attempt(ctx, s, in, timeout)
		if err == nil {
			out = o
			return nil
		}
		var re *lifecycle.RunError
		if context.Cause(ctx) != nil || (errors.As(err, &re) && re.Permanent) {
			return backoff.Permanent(err)
		}
		return err
	}
	// backoff.Retry's loop, waiting with clock.Sleep: the backoff counts as
	// the execution's wait on the clock (clock.Activity).
	for {
		err := op()
		if err == nil {
			return out, attempts, nil
		}
		var perm *backoff.PermanentError
		if errors.As(err, &perm) {
			return out, attempts, failureOf(s, attempts, perm.Err)
		}
		wait := policy.NextBackOff()
		if ctx.Err() != nil {
			return out, attempts, failureOf(s, attempts, ctx.Err())
		}
		if wait == backoff.Stop {
			return out, attempts, failureOf(s, attempts, err)
		}
		r.log.LogAttrs(ctx, slog.LevelWarn, "step_retry", slog.String("runId", in.RunID), slog.String("step", s.Name),
			slog.Int("attempt", attempts), slog.Duration("wait", wait), slog.String("error", err.Error()))
		if err := clock.Sleep(ctx, r.cfg.Clock, wait); err != nil {
			return out, attempts, failureOf(s, attempts, err)
		}
	}
}

// failureOf gives a step's final error its seed code: its own, AGENT_TIMEOUT
// for a timeout, INTERNAL_ERROR once retries are exhausted.
func failureOf(s Step, attempts int, err error) error {
	var re *lifecycle.RunError
	if errors.As(err, &re) {
		return re
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &lifecycle.RunError{Code: codes.InternalError, Message: fmt.Sprintf("step %s failed after %d attempts: %v", s.Name, attempts, err), Err: err}
}

// attempt runs the step once through core.Do on the runner's Units: under
// its timeout, in its own goroutine, so a step that ignores its context
// cannot hold the run past the timeout. Such a step's goroutine is
// abandoned: counted (Runner.Stragglers), logged, and its late result
// discarded.
func (x *execution) attempt(ctx context.Context, s Step, in StepInput, timeout time.Duration) (StepOutput, error) {
	timedOut := func() error {
		return lifecycle.NewRunError(codes.AgentTimeout, "step %s exceeded %s limit", s.Name, seconds(timeout))
	}
	out, err := core.Do(ctx, x.r.units, "step "+in.RunID+"/"+s.Name, timeout, func(uctx context.Context) (StepOutput, error) {
		o, err := s.Run(uctx, in)
		var oe *core.OverrunError
		if err != nil && errors.As(context.Cause(uctx), &oe) {
			return o, timedOut()
		}
		return o, err
	})
	var (
		oe *core.OverrunError
		pe *core.PanicError
	)
	switch {
	case errors.As(err, &oe):
		if m, ok := x.r.cfg.Metrics.(stragglerMetrics); ok {
			m.StepAbandoned(in.AgentSlug, s.Name)
		}
		return StepOutput{}, timedOut()
	case errors.As(err, &pe):
		return StepOutput{}, &lifecycle.RunError{Code: codes.InternalError, Message: fmt.Sprintf("step %s panicked: %v", s.Name, pe.Value), Permanent: true}
	}
	return out, err
}

func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int64(d/time.Second))
	}
	return d.String()
}

func (x *execution) stepRecord(i int, started time.Time, out StepOutput, attempts int, err error) (StepRecord, error) {
	s := x.agent.Steps[i]
	now := x.r.now()
	rec := StepRecord{
		StepNumber: i + 1, StepName: s.Name, Status: lifecycle.StepPending,
		StartedAt: &started, FinishedAt: &now, DurationMS: now.Sub(started).Milliseconds(),
		Resumable: s.Resumable, Idempotent: s.Idempotent, Attempts: attempts, Epoch: x.epoch,
	}
	// The step machine makes the moves (the file is written once, at the
	// end): pending → running → completed or failed.
	end := lifecycle.EventComplete
	if err != nil {
		end = lifecycle.EventFail
		rec.Error = err.Error()
	} else {
		rec.OutputSummary, rec.Output, rec.Proposals = out.Summary, out.Data, out.Proposals
	}
	for _, e := range []lifecycle.Event{lifecycle.EventStart, end} {
		if _, ferr := lifecycle.RunStep().Fire(context.Background(), &rec, e, lifecycle.ActorOrchestration); ferr != nil {
			return rec, ferr
		}
	}
	return rec, nil
}

// writeStep writes a step file, fenced (core.PutFenced): the file carries
// this runner's epoch, and a file of a newer epoch is never replaced, so a
// runner that lost its lease gets ErrLeaseLost and the new owner's file
// stays. The lease is confirmed first, so a lost writer also cannot create
// a file the new owner has not written yet, unless the new owner's write
// then replaces it.
func (x *execution) writeStep(ctx context.Context, rec StepRecord) error {
	if err := x.w.confirmLease(ctx); err != nil {
		return err
	}
	key, err := layout.RunStepKey(x.agent.Slug, x.w.runID, rec.StepNumber, rec.StepName)
	if err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	// Over this execution's own start marker: one compare-and-swap on the
	// version it wrote; anything else goes through PutFenced.
	done := false
	if v, ok := x.markers[rec.StepNumber]; ok {
		_, err := x.r.store.Put(ctx, key, b, storage.IfMatch(v))
		if err != nil && !errors.Is(err, storage.ErrPreconditionFailed) && !errors.Is(err, storage.ErrOutcomeUnknown) {
			return err
		}
		done = err == nil
	}
	if !done {
		if _, err := core.PutFenced(ctx, x.r.store, key, b, x.r.cfg.Owner, x.epoch, epochOf); err != nil {
			return err
		}
	}
	x.r.log.LogAttrs(ctx, slog.LevelInfo, "run_checkpoint", slog.String("runId", x.w.runID),
		slog.String("stepId", rec.StepName), slog.Bool("resumable", rec.Resumable))
	return nil
}

// markStarted writes the start marker of a step that is not idempotent
// before it runs: its step file in status running, create-only. The marker
// is what lets a takeover (or this process restarted under the same Owner)
// prove that such a step never started and run it instead of failing the
// run RUN_ORPHANED. Create-only makes the start one decision: if two
// runners (a new owner and a late one) both found no marker, exactly one
// creates it and runs the step; the other fails its run RUN_ORPHANED (the
// late one's status write is fenced anyway).
func (x *execution) markStarted(ctx context.Context, i int) error {
	if err := x.w.confirmLease(ctx); err != nil {
		return err
	}
	s := x.agent.Steps[i]
	now := x.r.now()
	rec := StepRecord{StepNumber: i + 1, StepName: s.Name, Status: lifecycle.StepPending, StartedAt: &now,
		Resumable: s.Resumable, Idempotent: s.Idempotent, Epoch: x.epoch}
	if _, err := lifecycle.RunStep().Fire(context.Background(), &rec, lifecycle.EventStart, lifecycle.ActorOrchestration); err != nil {
		return err
	}
	key, err := layout.RunStepKey(x.agent.Slug, x.w.runID, rec.StepNumber, rec.StepName)
	if err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	v, err := x.r.store.Put(ctx, key, b, storage.IfNotExists())
	if errors.Is(err, storage.ErrOutcomeUnknown) || errors.Is(err, storage.ErrPreconditionFailed) {
		old, ov, gerr := x.r.store.Get(ctx, key)
		if gerr != nil {
			return gerr
		}
		if string(old) == string(b) {
			x.markers[i+1] = ov // ours landed
			return nil
		}
		return lifecycle.NewRunError(codes.RunOrphaned, "step %s, which is not idempotent, was started by another runner", s.Name)
	}
	if err == nil {
		x.markers[i+1] = v
	}
	return err
}

// epochOf reads the writer's epoch of an SDK object (step file, manifest).
func epochOf(b []byte) (int64, bool) {
	var v struct {
		Epoch int64 `json:"epoch"`
	}
	return v.Epoch, json.Unmarshal(b, &v) == nil
}

func (x *execution) writeFiles(ctx context.Context, files map[string][]byte) ([]string, error) {
	if len(files) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		key, err := layout.RunOutputKey(x.agent.Slug, x.w.runID, name)
		if err != nil {
			return nil, &lifecycle.RunError{Code: codes.InternalError, Message: err.Error(), Permanent: true, Err: err}
		}
		if err := x.writeOutput(ctx, key, files[name]); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// writeOutput writes one output file. Its bytes are the step's, so it
// cannot carry an epoch; it is fenced by order instead: the writer observes
// the object (absent, or at version v), then confirms its lease, then
// writes conditionally on what it observed (create-only, or IfMatch v). A
// newer owner exists only after the lease it confirmed, so any object that
// owner wrote is newer than the observation and the lost writer's
// condition fails: it gets ErrLeaseLost on its next confirmation and
// writes nothing. A lost writer may still create a name the new owner has
// not written yet; the new owner replaces it when it writes that name, and
// only the outputs listed in the fenced manifest.json are the run's.
func (x *execution) writeOutput(ctx context.Context, key string, b []byte) error {
	if err := x.w.confirmLease(ctx); err != nil {
		return err
	}
	cond := storage.IfNotExists()
	for conflicts := 0; ; conflicts++ {
		_, err := x.r.store.Put(ctx, key, b, cond)
		if err == nil || (!errors.Is(err, storage.ErrPreconditionFailed) && !errors.Is(err, storage.ErrOutcomeUnknown)) {
			return err
		}
		if conflicts >= core.MaxConflicts {
			return err
		}
		old, v, gerr := x.r.store.Get(ctx, key)
		switch {
		case errors.Is(gerr, storage.ErrNotFound):
			cond = storage.IfNotExists()
		case gerr != nil:
			return gerr
		case errors.Is(err, storage.ErrOutcomeUnknown) && string(old) == string(b):
			return nil // ours landed
		default:
			cond = storage.IfMatch(v)
		}
		if err := x.w.confirmLease(ctx); err != nil {
			return err
		}
	}
}

// finish writes how the execution ended: the manifest and the terminal
// status, or the failure; then frees the slot and the active entry.
func (x *execution) finish(ctx context.Context, out outcome) {
	r := x.r
	doc := x.w.snapshot()
	out, manifestSays := x.endManifest(ctx, out, &doc)
	if out.kind == stopped || ctx.Err() != nil {
		x.abandon(ctx, out, doc.RunID)
		return
	}
	if out.kind == parked {
		r.releaseSlot(ctx, doc.AgentSlug, x.slotKey, x.slotVer)
		return
	}
	if err := x.writeEnd(ctx, out); err != nil {
		r.log.LogAttrs(ctx, slog.LevelError, "run_finish_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
		x.giveUp(ctx, err)
		if !errors.Is(err, records.ErrLeaseLost) && !errors.Is(err, records.ErrCorrupt) && ctx.Err() == nil {
			r.releaseSlotIfOurs(ctx, x) // not executing any more: recovery takes it from here
		}
		return
	}
	end := x.w.snapshot()
	if end.Status != manifestSays {
		// The status moved meanwhile (a cancel landed): the manifest
		// follows it.
		if err := x.writeManifest(ctx, out, end.Status); err != nil {
			r.log.LogAttrs(ctx, slog.LevelWarn, "manifest_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
		}
	}
	r.cleanup(ctx, doc.AgentSlug, doc.RunID, x.slotKey, x.slotVer)
	r.finished(ctx, end)
}

// endManifest writes the manifest of an execution that ends: at every
// end, before the status that records it, so a writer that lost this run
// to us cannot leave a manifest of its own: ours, fenced by a newer epoch,
// replaces its manifest or refuses it (see writeOutput). It gives the
// outcome (a done run whose manifest failed has a write failure) and the
// status the manifest says, "" when none was written.
func (x *execution) endManifest(ctx context.Context, out outcome, doc *Status) (outcome, string) {
	var manifestSays string
	if out.kind == done {
		if err := x.writeManifest(ctx, out, x.flow.completed); err != nil {
			out = x.writeFailure(ctx, err)
		}
	}
	if out.kind != done && out.kind != stopped && out.kind != parked && ctx.Err() == nil {
		if to, ok := x.flow.target(doc.Status, x.endEvent(out, doc)); ok {
			if err := x.writeManifest(ctx, out, to); err != nil && !errors.Is(err, records.ErrLeaseLost) {
				x.r.log.LogAttrs(ctx, slog.LevelWarn, "manifest_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
			}
			manifestSays = to
		}
	} else if out.kind == done {
		manifestSays = x.flow.completed
	}
	return out, manifestSays
}

// abandon lets go of a run whose execution was stopped or whose writes
// were cut. Quiet on the runner's shutdown; said when the run's deadline
// and grace cut its writes (a runner frozen that long writes nothing).
func (x *execution) abandon(ctx context.Context, out outcome, runID string) {
	reason := out.err
	if context.Cause(ctx) == errWriteLimit {
		reason = errors.Join(errWriteLimit, out.err)
	}
	if reason != nil && (!errors.Is(reason, context.Canceled) || errors.Is(reason, errWriteLimit)) {
		x.r.log.LogAttrs(ctx, slog.LevelWarn, "run_stopped", slog.String("runId", runID), slog.String("error", reason.Error()))
	}
	x.giveUp(ctx, out.err)
}

// writeEnd writes the terminal status the outcome says.
func (x *execution) writeEnd(ctx context.Context, out outcome) error {
	r := x.r
	f := x.flow
	b := bySystem()
	if out.kind == timedOut {
		b = byTimeout()
	}
	return x.w.apply(ctx, b, func(ctx context.Context, d *Status) error {
		var runErr error
		switch out.kind {
		case done:
			d.StepsCompleted = len(x.agent.Steps)
			d.CurrentStep = x.agent.Steps[len(x.agent.Steps)-1].Name
			d.ProposalsCreated = appendNew(d.ProposalsCreated, x.lastProposals...)
		case failed:
			runErr = out.err
		case timedOut:
			runErr = lifecycle.NewRunError(codes.AgentTimeout, "execution exceeded %s limit", seconds(r.cfg.RunTimeout))
		}
		if err := f.fire(ctx, d, x.endEvent(out, d), lifecycle.ActorOrchestration); err != nil {
			return err
		}
		r.finishFields(d, runErr)
		return nil
	})
}

// endEvent is the event that ends a run in state d.Status the way out
// says.
func (x *execution) endEvent(out outcome, d *Status) lifecycle.Event {
	f := x.flow
	switch out.kind {
	case failed:
		return f.fail
	case timedOut:
		if f.cancelRq != "" && d.Status == f.cancelRq {
			return f.cancel // cancel_requested cannot time out (seed 001); the cancel wins
		}
		return f.timeOut
	case canceled:
		return f.cancel
	}
	return f.complete
}

// finishFields sets what a terminal write records (seed 004 §2.3).
func (r *Runner) finishFields(d *Status, runErr error) {
	now := r.now()
	d.FinishedAt = &now
	d.DurationMS = now.Sub(d.StartedAt).Milliseconds()
	d.Lease = nil
	if runErr != nil {
		var re *lifecycle.RunError
		msg := runErr.Error()
		if !errors.As(runErr, &re) {
			msg = codes.InternalError + ": " + msg
		}
		d.Error = &msg
	}
}

// finished records a run's end in logs and metrics.
func (r *Runner) finished(ctx context.Context, d Status) {
	dur := time.Duration(d.DurationMS) * time.Millisecond
	r.cfg.Metrics.RunFinished(d.AgentSlug, d.Status, dur)
	r.log.LogAttrs(ctx, slog.LevelInfo, "run_completed", slog.String("runId", d.RunID),
		slog.Int64("durationMs", d.DurationMS), slog.String("status", d.Status))
}

// giveUp frees what an execution that stops without recording an end
// holds: the slot of a run it lost, or of a run whose status turned out
// poison (quarantined here, with its active entry).
func (x *execution) giveUp(ctx context.Context, err error) {
	var ce *records.CorruptError
	if errors.As(err, &ce) {
		_ = x.r.quarantineRun(ctx, x.agent.Slug, x.w.runID, ce)
	}
	if errors.Is(err, records.ErrLeaseLost) || errors.Is(err, records.ErrCorrupt) {
		x.r.releaseSlotIfOurs(ctx, x)
	}
}

func (r *Runner) releaseSlotIfOurs(ctx context.Context, x *execution) {
	r.releaseSlot(ctx, x.agent.Slug, x.slotKey, x.slotVer)
}

// writeManifest writes manifest.json as the run ends in state status.
// After the terminal write the lease is gone; the epoch still fences it.
func (x *execution) writeManifest(ctx context.Context, out outcome, status string) error {
	if !x.flow.terminal(x.w.snapshot().Status) {
		if err := x.w.confirmLease(ctx); err != nil {
			return err
		}
	}
	doc := x.w.snapshot()
	var steps []manifestStep
	for i := range x.agent.Steps {
		if rec, ok := x.records[i+1]; ok {
			steps = append(steps, manifestStep{StepNumber: rec.StepNumber, StepName: rec.StepName, Status: rec.Status, DurationMS: rec.DurationMS})
		}
	}
	now := x.r.now()
	m := manifest{
		RunID: doc.RunID, AgentSlug: doc.AgentSlug, Status: status, Trigger: doc.Trigger,
		StartedAt: doc.StartedAt, FinishedAt: now, DurationMS: now.Sub(doc.StartedAt).Milliseconds(),
		Steps: steps, ProposalsCreated: appendNew(append([]string{}, doc.ProposalsCreated...), x.lastProposals...),
		Outputs: out.files, Epoch: x.epoch,
	}
	key, err := layout.RunManifestKey(doc.AgentSlug, doc.RunID)
	if err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = core.PutFenced(ctx, x.r.store, key, b, x.r.cfg.Owner, x.epoch, epochOf)
	return err
}
