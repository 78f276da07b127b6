package run

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// finish writes how the execution ended: the manifest and the terminal
// status, or the failure; then frees the slot and the active entry.
func (x *execution) finish(ctx context.Context, out outcome) {
	e := x.e
	doc := x.w.snapshot()
	out, manifestSays := x.endManifest(ctx, out, &doc)
	if out.kind == stopped || ctx.Err() != nil {
		x.abandon(ctx, out, doc.RunID)
		return
	}
	if out.kind == parked {
		e.slots.release(ctx, doc.AgentSlug, x.slotKey, x.slotVer)
		return
	}
	if err := x.writeEnd(ctx, out); err != nil {
		e.log.LogAttrs(ctx, slog.LevelError, "run_finish_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
		x.giveUp(ctx, err)
		if !errors.Is(err, lifecycle.ErrLeaseLost) && !errors.Is(err, lifecycle.ErrCorrupt) && ctx.Err() == nil {
			e.slots.releaseHeld(ctx, x) // not executing any more: recovery takes it from here
		}
		return
	}
	end := x.w.snapshot()
	if end.Status != manifestSays {
		// The status moved meanwhile (a cancel landed): the manifest
		// follows it.
		if err := x.writeManifest(ctx, out, end.Status); err != nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "manifest_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
		}
	}
	e.ender.cleanup(ctx, doc.AgentSlug, doc.RunID, x.slotKey, x.slotVer)
	e.ender.finished(ctx, end)
}

// endManifest writes the manifest of an execution that ends: at every
// end, before the status that records it, so a writer that lost this run
// to us cannot leave a manifest of its own: ours, fenced by a newer epoch,
// replaces its manifest or refuses it (see writeOutput). It gives the
// outcome (a done run whose manifest failed has a write failure) and the
// status the manifest says, "" when none was written.
func (x *execution) endManifest(ctx context.Context, out outcome, doc *lifecycle.RunStatus) (outcome, string) {
	var manifestSays string
	if out.kind == done {
		if err := x.writeManifest(ctx, out, x.flow.completed); err != nil {
			out = x.writeFailure(ctx, err)
		}
	}
	if out.kind != done && out.kind != stopped && out.kind != parked && ctx.Err() == nil {
		if to, ok := x.flow.target(doc.Status, x.flow.endEvent(out.kind, doc.Status)); ok {
			if err := x.writeManifest(ctx, out, to); err != nil && !errors.Is(err, lifecycle.ErrLeaseLost) {
				x.e.log.LogAttrs(ctx, slog.LevelWarn, "manifest_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
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
		x.e.log.LogAttrs(ctx, slog.LevelWarn, "run_stopped", slog.String("runId", runID), slog.String("error", reason.Error()))
	}
	x.giveUp(ctx, out.err)
}

// writeEnd writes the terminal status the outcome says.
func (x *execution) writeEnd(ctx context.Context, out outcome) error {
	e := x.e
	f := x.flow
	b := bySystem()
	if out.kind == timedOut {
		b = byTimeout()
	}
	return x.w.apply(ctx, b, func(ctx context.Context, d *lifecycle.RunStatus) error {
		var runErr error
		switch out.kind {
		case done:
			d.StepsCompleted = len(x.agent.Steps)
			d.CurrentStep = x.agent.Steps[len(x.agent.Steps)-1].Name
		case failed:
			runErr = out.err
		case timedOut:
			runErr = lifecycle.NewRunError(codes.AgentTimeout, "execution exceeded %s limit", seconds(e.cfg.RunTimeout))
		}
		// Proposals created and not yet counted: the last step's, or a
		// graph branch's that settled after another branch ended the run.
		d.ProposalsCreated = appendNew(d.ProposalsCreated, x.lastProposals...)
		if err := f.fire(ctx, d, f.endEvent(out.kind, d.Status), lifecycle.ActorOrchestration); err != nil {
			return err
		}
		e.ender.finishFields(d, runErr)
		return nil
	})
}

// endEvent is the event that ends a run in state status the way an
// outcome of kind says.
func (f *flow) endEvent(kind outcomeKind, status string) lifecycle.Event {
	switch kind {
	case failed:
		return f.fail
	case timedOut:
		if f.cancelRq != "" && status == f.cancelRq {
			return f.cancel // cancel_requested cannot time out (docs/spec.md#cancel-aware-run); the cancel wins
		}
		return f.timeOut
	case canceled:
		return f.cancel
	}
	return f.complete
}

// giveUp frees what an execution that stops without recording an end
// holds: the slot of a run it lost, or of a run whose status turned out
// poison (quarantined here, with its active entry).
func (x *execution) giveUp(ctx context.Context, err error) {
	var ce *lifecycle.QuarantinedError
	if errors.As(err, &ce) {
		_ = x.e.statuses.quarantineRun(ctx, x.agent.Slug, x.w.runID, ce)
	}
	if errors.Is(err, lifecycle.ErrLeaseLost) || errors.Is(err, lifecycle.ErrCorrupt) {
		x.e.slots.releaseHeld(ctx, x)
	}
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
	now := x.e.now()
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
	_, err = fence.Put(ctx, x.e.store, key, b, x.e.cfg.Owner, x.epoch, epochOf)
	return err
}

// ender does what every end of a run does, whoever ends it (its
// execution, the poll, a control call): the terminal fields, the slot and
// active entry freed, the log line and metrics.
type ender struct {
	store    *storage.Store
	now      func() time.Time
	log      *slog.Logger
	metrics  Metrics
	slots    *slots
	writers  *writers
	verdicts *verdicts
}

// cleanup removes a finished or parked run from the active index (finished
// only) and frees its slot.
//
// A run whose last audit event could not be written, or whose status index
// entry could not be moved, keeps its active entry: a poll finds it there,
// writes the event (auditLog.ensure) or repairs the entries
// (history.repairRunIndex) and cleans up then.
func (e *ender) cleanup(ctx context.Context, slug, runID, slot string, slotVer storage.Version) {
	e.slots.release(ctx, slug, slot, slotVer)
	e.verdicts.forget(runID)
	if !e.writers.settled(runID) {
		return // the poll finds the run by its active entry and repairs it
	}
	key, err := layout.RunActiveKey(slug, runID)
	if err != nil {
		return
	}
	if err := e.store.Delete(ctx, key, storage.Condition{}); err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "active_index_cleanup_failed", slog.String("runId", runID), slog.String("error", err.Error()))
	}
}

// finishFields sets what a terminal write records (docs/spec.md#run-status).
func (e *ender) finishFields(d *lifecycle.RunStatus, runErr error) {
	now := e.now()
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
func (e *ender) finished(ctx context.Context, d lifecycle.RunStatus) {
	dur := time.Duration(d.DurationMS) * time.Millisecond
	if tm, ok := e.metrics.(tenantMetrics); ok && d.TenantID != "" {
		tm.RunFinishedOf(d.TenantID, d.AgentSlug, d.Status, dur)
	} else {
		e.metrics.RunFinished(d.AgentSlug, d.Status, dur)
	}
	e.log.LogAttrs(ctx, slog.LevelInfo, "run_completed", slog.String("runId", d.RunID),
		slog.Int64("durationMs", d.DurationMS), slog.String("status", d.Status))
}

// manifest is a finished run's manifest.json: its metadata and what it made.
type manifest struct {
	RunID            string          `json:"run_id"`
	AgentSlug        string          `json:"agent_slug"`
	Status           string          `json:"status"`
	Trigger          string          `json:"trigger"`
	StartedAt        time.Time       `json:"started_at"`
	FinishedAt       time.Time       `json:"finished_at"`
	DurationMS       int64           `json:"duration_ms"`
	Steps            []manifestStep  `json:"steps"`
	ProposalsCreated []string        `json:"proposals_created"`
	Outputs          []string        `json:"outputs,omitempty"`
	Input            json.RawMessage `json:"input,omitempty"`
	// Epoch is the lease epoch of the runner that wrote the manifest: a
	// runner of an older epoch cannot replace it (docs/spec.md#recovery).
	Epoch int64 `json:"epoch,omitempty"`
}

// manifestStep summarises one step in the manifest.
type manifestStep struct {
	StepNumber int                 `json:"step_number"`
	StepName   string              `json:"step_name"`
	Status     lifecycle.StepState `json:"status"`
	DurationMS int64               `json:"duration_ms"`
}
