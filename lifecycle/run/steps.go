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
	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/storage"
	"go.opentelemetry.io/otel/trace"
)

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

// attempt runs the step once through core.Do on the runner's Units: under
// its timeout, in its own goroutine, so a step that ignores its context
// cannot hold the run past the timeout. Such a step's goroutine is
// abandoned: counted (Runner.Stragglers), logged, and its late result
// discarded.
func (x *execution) attempt(ctx context.Context, s Step, in StepInput, timeout time.Duration) (StepOutput, error) {
	timedOut := func() error {
		return lifecycle.NewRunError(codes.AgentTimeout, "step %s exceeded %s limit", s.Name, seconds(timeout))
	}
	out, err := core.Do(ctx, x.e.units, "step "+in.RunID+"/"+s.Name, timeout, func(uctx context.Context) (StepOutput, error) {
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

func (x *execution) stepRecord(i int, started time.Time, out StepOutput, attempts int, err error) (StepRecord, error) {
	s := x.agent.Steps[i]
	now := x.e.now()
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
		_, err := x.e.store.Put(ctx, key, b, storage.IfMatch(v))
		if err != nil && !errors.Is(err, storage.ErrPreconditionFailed) && !errors.Is(err, storage.ErrOutcomeUnknown) {
			return err
		}
		done = err == nil
	}
	if !done {
		if _, err := core.PutFenced(ctx, x.e.store, key, b, x.e.cfg.Owner, x.epoch, epochOf); err != nil {
			return err
		}
	}
	x.e.log.LogAttrs(ctx, slog.LevelInfo, "run_checkpoint", slog.String("runId", x.w.runID),
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
	now := x.e.now()
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
	v, err := x.e.store.Put(ctx, key, b, storage.IfNotExists())
	if errors.Is(err, storage.ErrOutcomeUnknown) || errors.Is(err, storage.ErrPreconditionFailed) {
		old, ov, gerr := x.e.store.Get(ctx, key)
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
		_, err := x.e.store.Put(ctx, key, b, cond)
		if err == nil || (!errors.Is(err, storage.ErrPreconditionFailed) && !errors.Is(err, storage.ErrOutcomeUnknown)) {
			return err
		}
		if conflicts >= core.MaxConflicts {
			return err
		}
		old, v, gerr := x.e.store.Get(ctx, key)
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
