package run

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/storage"
)

func (x *execution) stepRecord(i int, started time.Time, out StepOutput, attempts int, err error) (lifecycle.StepRecord, error) {
	s := x.agent.Steps[i]
	now := x.e.now()
	rec := lifecycle.StepRecord{
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
func (x *execution) writeStep(ctx context.Context, rec lifecycle.StepRecord) error {
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
	rec := lifecycle.StepRecord{StepNumber: i + 1, StepName: s.Name, Status: lifecycle.StepPending, StartedAt: &now,
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
