package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
	"go.opentelemetry.io/otel/trace"
)

// One step of an execution: its attempts under their timeout and retries,
// and its files (start marker, step file, outputs), fenced by the
// execution's lease.

// doStep runs step i (number i+1) and records how it went. end is set when
// the execution ends here: stopped, the step failed, or a write failed.
func (x *execution) doStep(runCtx, ctx context.Context, i int, s Step, in StepInput) (StepOutput, []string, *outcome) {
	if end := x.markStart(ctx, i, s); end != nil {
		return StepOutput{}, nil, end
	}
	started := x.e.now()
	out, attempts, stepErr := x.runStep(runCtx, s, in)
	if stepErr != nil && isStop(runCtx) && !isTimeout(runCtx) && context.Cause(runCtx) != errCanceled {
		end := stoppedBy(context.Cause(runCtx))
		return out, nil, &end
	}
	if stepErr != nil {
		stepErr = stoppedStepError(runCtx, s, stepErr)
	} else {
		stepErr = nameProposals(in, &out)
	}
	names, end := x.writeStepEnd(runCtx, ctx, i, s, started, out, attempts, stepErr, nil)
	return out, names, end
}

// writeStepEnd records how step i's attempts ended (stepErr the error the
// step ends with). A step that completed has its output files and its
// proposals' records written first, then its step file: the step file
// names them, and a takeover keeps a completed step without running it
// again, so nothing it names may be left unwritten by a crash. Then the
// step file, fenced, completed by fill when set; the step metrics; the
// record kept for the manifest. It returns the names of the files written
// and the execution's end when the step failed or a write did. A linear
// and a graph execution both end their steps here.
func (x *execution) writeStepEnd(runCtx, ctx context.Context, i int, s Step, started time.Time, out StepOutput, attempts int, stepErr error, fill func(*lifecycle.StepRecord)) ([]string, *outcome) {
	rec, err := newStepRecord(s, i, x.epoch, started, x.e.now(), out, attempts, stepErr)
	if err != nil {
		return nil, &outcome{kind: failed, err: err}
	}
	if fill != nil {
		fill(&rec)
	}
	var names []string
	if stepErr == nil {
		if names, err = x.files.writeFiles(ctx, out.Files); err == nil {
			err = x.createProposals(ctx, i, s, out)
		}
		if err != nil {
			end := x.writeFailure(ctx, err)
			return nil, &end
		}
	}
	if err := x.files.writeStep(ctx, rec); err != nil {
		end := x.writeFailure(ctx, err)
		return nil, &end
	}
	if m, ok := x.e.cfg.Metrics.(stepMetrics); ok {
		m.StepFinished(x.agent.Slug, s.Name, string(rec.Status), rec.FinishedAt.Sub(*rec.StartedAt))
	}
	x.records[rec.StepNumber] = rec
	if stepErr != nil {
		end := stepFailure(runCtx, stepErr)
		return nil, &end
	}
	return names, nil
}

// markStart writes the start marker of step i when it is not idempotent,
// before it runs; it returns the execution's end when that failed.
func (x *execution) markStart(ctx context.Context, i int, s Step) *outcome {
	if s.Idempotent {
		return nil
	}
	if err := x.files.markStarted(ctx, i, s); err != nil {
		end := x.startFailure(ctx, err)
		return &end
	}
	return nil
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

func isStop(ctx context.Context) bool { return context.Cause(ctx) != nil }

func isTimeout(ctx context.Context) bool { return context.Cause(ctx) == errRunTimeout }

// runStep runs one step with its per-attempt timeout and the retry schedule
// (StepRetries more attempts, RetryBackoff doubling), waiting on the
// runner's clock. It returns the output, the attempts made and the error of
// the last attempt, with its error code.
func (x *execution) runStep(ctx context.Context, s Step, in StepInput) (StepOutput, int, error) {
	e := x.e
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = e.cfg.StepTimeout
	}
	exp := &backoff.ExponentialBackOff{
		InitialInterval:     e.cfg.RetryBackoff,
		RandomizationFactor: 0, // docs/spec.md#retries-and-timeouts: exactly 1 s, 2 s, 4 s
		Multiplier:          2,
		MaxInterval:         time.Duration(1<<62 - 1),
		Stop:                backoff.Stop,
		Clock:               e.cfg.Clock,
	}
	exp.Reset()
	policy := backoff.WithMaxRetries(exp, uint64(e.cfg.StepRetries))
	var out StepOutput
	attempts := 0
	op := func() error {
		attempts++
		in.Attempt = attempts
		actx, span := e.tracer.Start(ctx, tracing.SpanStep, trace.SpanKindInternal)
		span.String(tracing.AttrRunID, in.RunID)
		span.String(tracing.AttrStep, s.Name)
		span.Int(tracing.AttrStepNum, int64(in.Step))
		span.Int(tracing.AttrAttempt, int64(attempts))
		o, err := x.attempt(actx, s, in, timeout)
		span.End(err)
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
	// backoff.Retry's loop, waiting with activity.Sleep: the backoff counts as
	// the execution's wait on the clock (activity.Activity).
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
		e.log.LogAttrs(ctx, slog.LevelWarn, "step_retry", slog.String("runId", in.RunID), slog.String("step", s.Name),
			slog.Int("attempt", attempts), slog.Duration("wait", wait), slog.String("error", err.Error()))
		if err := activity.Sleep(ctx, e.cfg.Clock, wait); err != nil {
			return out, attempts, failureOf(s, attempts, err)
		}
	}
}

// failureOf gives a step's final error its code: its own, AGENT_TIMEOUT
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

// attempt runs the step once through deadline.Do on the runner's Units: under
// its timeout, in its own goroutine, so a step that ignores its context
// cannot hold the run past the timeout. Such a step's goroutine is
// abandoned: counted (deadline.Units), logged, and its late result
// discarded.
func (x *execution) attempt(ctx context.Context, s Step, in StepInput, timeout time.Duration) (StepOutput, error) {
	timedOut := func() error {
		return lifecycle.NewRunError(codes.AgentTimeout, "step %s exceeded %s limit", s.Name, seconds(timeout))
	}
	// The step acts for its run's tenant: what it submits or inserts is
	// the tenant's (docs/design.md#tenants).
	tenant := x.tenant
	out, err := deadline.Do(ctx, x.e.units, "step "+in.RunID+"/"+s.Name, timeout, func(uctx context.Context) (StepOutput, error) {
		o, err := s.Run(lifecycle.WithTenant(uctx, tenant), in)
		var oe *deadline.OverrunError
		if err != nil && errors.As(context.Cause(uctx), &oe) {
			return o, timedOut()
		}
		return o, err
	})
	var (
		oe *deadline.OverrunError
		pe *deadline.PanicError
	)
	switch {
	case errors.As(err, &oe):
		if m, ok := x.e.cfg.Metrics.(stragglerMetrics); ok {
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

// newStepRecord is the step file of step s (number i+1) of an execution of
// epoch, started at started and ended now after attempts, with its output
// or its error.
func newStepRecord(s Step, i int, epoch int64, started, now time.Time, out StepOutput, attempts int, err error) (lifecycle.StepRecord, error) {
	rec := lifecycle.StepRecord{
		StepNumber: i + 1, StepName: s.Name, Status: lifecycle.StepPending,
		StartedAt: &started, FinishedAt: &now, DurationMS: now.Sub(started).Milliseconds(),
		Resumable: s.Resumable, Idempotent: s.Idempotent, Attempts: attempts, Epoch: epoch,
	}
	// The step machine makes the moves (the file is written once, at the
	// end): pending → running → completed or failed.
	end := machine.EventComplete
	if err != nil {
		end = machine.EventFail
		rec.Error = err.Error()
	} else {
		rec.OutputSummary, rec.Output, rec.Proposals = out.Summary, out.Data, out.Proposals
		rec.TokensUsed = out.TokensUsed
	}
	for _, e := range []lifecycle.Event{machine.EventStart, end} {
		if _, ferr := machine.RunStep().Fire(context.Background(), &rec, e, lifecycle.ActorOrchestration); ferr != nil {
			return rec, ferr
		}
	}
	return rec, nil
}

// stepFiles write the files of an execution's steps: the start marker of
// a step that is not idempotent, the step file, and the step's output
// files, each fenced by the execution's lease (its writer's confirmation)
// and epoch. They remember the versions of the start markers they wrote
// (markers, by step number), so a step file replaces its own marker with
// one compare-and-swap.
type stepFiles struct {
	store   *storage.Store
	now     func() time.Time
	log     *slog.Logger
	owner   string // Config.Owner
	slug    string
	runID   string
	epoch   int64
	w       *statusWriter
	markers map[int]storage.Version
}

// markStarted writes the start marker of a step that is not idempotent
// before it runs: its step file in status running, create-only. The marker
// is what lets a takeover (or this process restarted under the same Owner)
// prove that such a step never started and run it instead of failing the
// run RUN_ORPHANED. Create-only makes the start one decision: if two
// runners (a new owner and a late one) both found no marker, exactly one
// creates it and runs the step; the other fails its run RUN_ORPHANED (the
// late one's status write is fenced anyway).
func (f *stepFiles) markStarted(ctx context.Context, i int, s Step) error {
	if err := f.w.confirmLease(ctx); err != nil {
		return err
	}
	now := f.now()
	rec := lifecycle.StepRecord{StepNumber: i + 1, StepName: s.Name, Status: lifecycle.StepPending, StartedAt: &now,
		Resumable: s.Resumable, Idempotent: s.Idempotent, Epoch: f.epoch}
	if _, err := machine.RunStep().Fire(context.Background(), &rec, machine.EventStart, lifecycle.ActorOrchestration); err != nil {
		return err
	}
	key, err := layout.RunStepKey(f.slug, f.runID, rec.StepNumber, rec.StepName)
	if err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	v, err := f.store.Put(ctx, key, b, storage.IfNotExists())
	if errors.Is(err, storage.ErrOutcomeUnknown) || errors.Is(err, storage.ErrPreconditionFailed) {
		old, ov, gerr := f.store.Get(ctx, key)
		if gerr != nil {
			return gerr
		}
		if string(old) == string(b) {
			f.markers[i+1] = ov // ours landed
			return nil
		}
		return lifecycle.NewRunError(codes.RunOrphaned, "step %s, which is not idempotent, was started by another runner", s.Name)
	}
	if err == nil {
		f.markers[i+1] = v
	}
	return err
}

// writeStep writes a step file, fenced (fence.Put): the file carries
// this runner's epoch, and a file of a newer epoch is never replaced, so a
// runner that lost its lease gets ErrLeaseLost and the new owner's file
// stays. The lease is confirmed first, so a lost writer also cannot create
// a file the new owner has not written yet, unless the new owner's write
// then replaces it.
func (f *stepFiles) writeStep(ctx context.Context, rec lifecycle.StepRecord) error {
	if err := f.w.confirmLease(ctx); err != nil {
		return err
	}
	key, err := layout.RunStepKey(f.slug, f.runID, rec.StepNumber, rec.StepName)
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
	if v, ok := f.markers[rec.StepNumber]; ok {
		_, err := f.store.Put(ctx, key, b, storage.IfMatch(v))
		if err != nil && !errors.Is(err, storage.ErrPreconditionFailed) && !errors.Is(err, storage.ErrOutcomeUnknown) {
			return err
		}
		done = err == nil
	}
	if !done {
		if _, err := fence.Put(ctx, f.store, key, b, f.owner, f.epoch, epochOf); err != nil {
			return err
		}
	}
	f.log.LogAttrs(ctx, slog.LevelInfo, "run_checkpoint", slog.String("runId", f.runID),
		slog.String("stepId", rec.StepName), slog.Bool("resumable", rec.Resumable))
	return nil
}

// epochOf reads the writer's epoch of an SDK object (step file, manifest).
func epochOf(b []byte) (int64, bool) {
	var v struct {
		Epoch int64 `json:"epoch"`
	}
	return v.Epoch, json.Unmarshal(b, &v) == nil
}

func (f *stepFiles) writeFiles(ctx context.Context, files map[string][]byte) ([]string, error) {
	if len(files) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		key, err := layout.RunOutputKey(f.slug, f.runID, name)
		if err != nil {
			return nil, &lifecycle.RunError{Code: codes.InternalError, Message: err.Error(), Permanent: true, Err: err}
		}
		if err := f.writeOutput(ctx, key, files[name]); err != nil {
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
func (f *stepFiles) writeOutput(ctx context.Context, key string, b []byte) error {
	if err := f.w.confirmLease(ctx); err != nil {
		return err
	}
	cond := storage.IfNotExists()
	for conflicts := 0; ; conflicts++ {
		_, err := f.store.Put(ctx, key, b, cond)
		if err == nil || (!errors.Is(err, storage.ErrPreconditionFailed) && !errors.Is(err, storage.ErrOutcomeUnknown)) {
			return err
		}
		if conflicts >= fence.MaxConflicts {
			return err
		}
		old, v, gerr := f.store.Get(ctx, key)
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
		if err := f.w.confirmLease(ctx); err != nil {
			return err
		}
	}
}
