package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Handlers are the steps of the NLM pipeline, the Handler of the built-in
// job types (RESEARCH, BRIEF, PROPOSAL_PREPROCESS: docs/spec.md#job-lifecycle),
// which the Worker takes as Worker.Handlers. The queue runs them in order,
// each under Config.StepTimeout, and writes ARTIFACT_WRITE itself. A
// handler's error sends the job to RETRY_BACKOFF; return a *StatusError
// for an HTTP status (429, 503) so the job's error_code says which, and
// Permanent(err) for a failure no retry can mend (the job goes to DEAD at
// once). A job type of your own needs none of this: give it a Handler
// (Config.Types).
type Handlers struct {
	// AssembleContext is CONTEXT_ASSEMBLY: it builds the context snapshot
	// (the memory backend's part). Nil means an empty snapshot.
	AssembleContext func(ctx context.Context, job lifecycle.Job) (json.RawMessage, error)
	// CallNotebookLM is NOTEBOOKLM_CALL: it asks the NLM backend and returns
	// the artifact content. Handlers without it run nothing.
	CallNotebookLM func(ctx context.Context, job lifecycle.Job, snapshot json.RawMessage) (lifecycle.JobOutput, error)
}

// StatusError is a handler error carrying an HTTP status, e.g. 429 or 503
// from the NLM backend.
type StatusError struct {
	Code int
	Err  error
}

// Error renders the status and the cause.
func (e *StatusError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("HTTP %d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("HTTP %d: %v", e.Code, e.Err)
}

// Unwrap returns the cause.
func (e *StatusError) Unwrap() error { return e.Err }

// Permanent marks a handler's error (or an artifact content check's) as
// permanent: the job is not retried, whatever attempts it has left. It
// goes on at once through the job table, ARTIFACT_WRITE or another
// pipeline state → RETRY_BACKOFF → FAILED → DEAD (the table has no edge
// from a pipeline state to FAILED; backoff_elapsed's guard sends a job
// whose error_code is PERMANENT to FAILED), with error_code PERMANENT and
// the error's text. An operator's requeue runs it afresh. Permanent(nil)
// is nil; errors.Is and errors.As see through it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// errorCode classifies a step's error.
func errorCode(step lifecycle.JobState, stepCtx context.Context, err error) string {
	var se *StatusError
	var pe *permanentError
	switch {
	case errors.As(err, &pe):
		return codes.JobPermanent
	case errors.Is(err, deadline.ErrOverrun), errors.Is(context.Cause(stepCtx), errStepTimeout), errors.Is(err, errStepTimeout), errors.Is(err, context.DeadlineExceeded):
		return codes.JobTimeout
	case errors.As(err, &se) && se.Code == http.StatusTooManyRequests:
		return codes.JobRateLimited
	case errors.As(err, &se) && se.Code == http.StatusServiceUnavailable:
		return codes.JobUnavailable
	case errors.As(err, &se):
		return fmt.Sprintf("HTTP_%d", se.Code)
	case step == lifecycle.JobArtifactWrite:
		return codes.JobArtifactWriteError
	}
	return codes.JobHandlerError
}

// runner is what a Claim runs its job with: the handlers' calls under
// StepTimeout, the fenced writes of the job, the artifact store, and the
// lock, lane and schedule of its agent.
type runner struct {
	store         *storage.Store // the agent lock's writes
	clock         clock.Clock
	log           *slog.Logger
	tracer        tracing.Tracer
	units         *deadline.Units // the handlers' calls, under StepTimeout
	jobs          *jobStore
	lanes         *lanes
	sched         *scheduler
	audit         *auditor
	retries       *retries
	obs           *observer
	artifacts     *artifact.Store
	types         map[lifecycle.JobType]TypeConfig
	project       defaultProject
	artifactActor lifecycle.Actor
	leaseTTL      time.Duration
	stepTimeout   time.Duration
	grace         stopGrace
	workMW        []func(next Handler) Handler // Config.WorkMiddleware
	// jointArtifact: the artifact is written in the commit of the job's
	// end (endWith): the store commits, and the artifact store is the
	// queue's own, over it.
	jointArtifact bool
	caps          *caps // the claims running, against the configured caps (Claim.end)
}

// Run runs the claimed job's pipeline (docs/spec.md#job-lifecycle) with the
// job type's Handler (Config.Types), or else h. A job of a type of the
// user's runs on the general machine: its Handler works in RUNNING, its
// artifact is written and RUNNING → COMPLETE (a cancel asked for meanwhile
// ends it CANCELLED instead, see Queue.Cancel). A job of the NLM types runs
// the spec's: CONTEXT_ASSEMBLY (for Handlers with AssembleContext) →
// NOTEBOOKLM_CALL, where the Handler works → ARTIFACT_WRITE → COMPLETE. On
// either, an error sends
// it to RETRY_BACKOFF (retried after its type's Backoff, by default
// Config.Backoff, while attempts are left). A user type's Handler runs
// inside Config.WorkMiddleware, under its type's Timeout. ARTIFACT_WRITE writes the job's one artifact (keyed by job id,
// finalized, fenced by the claim's epoch: a lost attempt's artifact is
// replaced, a newer one never) and COMPLETE points the job at it in a
// fenced write, so no reader sees COMPLETE without its finalized artifact,
// written by the attempt that completed (F3). It returns
// the job as last written. An error means the claim could not write
// (lifecycle.ErrLeaseLost when another worker rescued the job); a handler's failure
// is not an error of Run, it is the job's state.
//
// The attempt continues the trace its enqueue stored: a conveyor.job span
// (with Config.TracerProvider set), its handlers' spans its children.
func (c *Claim) Run(ctx context.Context, h Handler) (lifecycle.Job, error) {
	job := c.Job()
	ctx = tracing.Continue(ctx, job.TraceParent)
	ctx, span := c.r.tracer.Start(ctx, tracing.SpanJob, trace.SpanKindConsumer)
	span.String(tracing.AttrJobID, job.JobID)
	span.String(tracing.AttrJobType, string(job.JobType))
	span.String(tracing.AttrAgent, job.AgentSlug)
	span.String(tracing.AttrRunID, job.RunID)
	span.Int(tracing.AttrAttempt, int64(job.Attempt))
	span.String(tracing.AttrMessagingSystem, tracing.MessagingSystem)
	span.String(tracing.AttrMessagingOperation, tracing.MessagingProcess)
	span.String(tracing.AttrMessagingDestination, job.AgentSlug) // the job's lane
	job, err := c.run(ctx, h)
	span.String(tracing.AttrOutcome, string(job.Status))
	if job.Error != nil && job.Status != lifecycle.JobComplete {
		span.Fail(*job.Error)
	}
	span.End(err)
	return job, err
}

// run is Run, in the attempt's span.
func (c *Claim) run(ctx context.Context, h Handler) (lifecycle.Job, error) {
	// The run counts as work on the clock but while it waits for a handler
	// or a timer (a test's fake clock moves only when it is idle;
	// activity.Activity).
	ctx, end := activity.Enter(ctx, c.r.clock)
	defer end()
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return c.job, errors.New("jobqueue: claim already run")
	}
	c.mu.Unlock()
	if h = c.r.handlerFor(c.Job().JobType, h); h == nil {
		_ = c.Abandon(ctx)
		return c.Job(), fmt.Errorf("jobqueue: no Handler for job type %s (Config.Types; Handlers with CallNotebookLM for the built-in types)", c.Job().JobType)
	}
	if _, builtin := artifact.TypeForJob(c.Job().JobType); !builtin && len(c.r.workMW) > 0 {
		h = wrapWork(h, c.r.workMW)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c.renewedAt.Store(c.r.clock.Now().UnixNano())
	stop := c.heartbeat(runCtx, cancel)
	job, err := c.pipeline(runCtx, h)
	stop()
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	if cause := context.Cause(runCtx); errors.Is(cause, lifecycle.ErrLeaseLost) && (err == nil || errors.Is(err, context.Canceled)) {
		err = cause // the heartbeat found the lease lost, and the write it cut says only "canceled"
	}
	ectx, ecancel := c.r.grace.after(ctx)
	defer ecancel()
	c.end(ectx)
	return job, err
}

// toArtifactWrite records the move NOTEBOOKLM_CALL → ARTIFACT_WRITE in
// the write that ends the artifact step, unless the job is there already.
func toArtifactWrite(ctx context.Context, d *jobDoc) error {
	if d.Status != lifecycle.JobNotebookLMCall {
		return nil
	}
	return fire(ctx, d, machine.EventResponseOK, lifecycle.ActorOrchestration)
}

// step runs fn as one unit of the core under limit (the step timeout, or
// the job type's for its handler's call), on the
// queue's clock: at the timeout the step ends with an error matching
// errStepTimeout whether or not fn returns, and a fn that ignores its
// context is left behind, counted as a straggler, its result dropped.
func (c *Claim) step(ctx context.Context, name string, limit time.Duration, fn func(ctx context.Context) error) (context.Context, error) {
	job := c.Job()
	hctx, span := c.r.tracer.Start(ctx, tracing.SpanHandler, trace.SpanKindInternal)
	span.String(tracing.AttrHandler, name)
	span.String(tracing.AttrJobID, job.JobID)
	_, err := deadline.Do(hctx, c.r.units, "job "+job.JobID+" "+name, limit, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, fn(ctx)
	})
	if errors.Is(err, deadline.ErrOverrun) {
		c.r.obs.abandoned(job.JobType, job.Status)
		err = fmt.Errorf("%w: %w", errStepTimeout, err)
	}
	span.End(err)
	return ctx, err
}

// pipeline runs the job pipeline of the claimed job: CONTEXT_ASSEMBLY
// (assembleContext, for Handlers), NOTEBOOKLM_CALL (the Handler's work),
// ARTIFACT_WRITE (writeArtifact) and the commit; a failed step is
// recorded by orchestrate.
func (c *Claim) pipeline(ctx context.Context, h Handler) (lifecycle.Job, error) {
	job := c.Job()
	if job.Status == lifecycle.JobRunning {
		return c.work(ctx, h)
	}
	nlm, isNLM := nlmSteps(h)
	snapshot, sctx, err := c.assembleContext(ctx, nlm, job)
	if err != nil {
		return c.orchestrate(ctx, lifecycle.JobContextAssembly, sctx, err)
	}
	if job.Status == lifecycle.JobContextAssembly {
		if err := c.move(ctx, machine.EventSnapshotReady, nil); err != nil {
			return c.Job(), err
		}
		job = c.Job()
	}
	var out lifecycle.JobOutput
	name, work := "Work", h.Work
	if isNLM {
		name, work = "CallNotebookLM", func(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error) {
			return nlm.CallNotebookLM(ctx, job, snapshot)
		}
	}
	sctx, err = c.step(ctx, name, c.r.timeoutOf(job.JobType), func(ctx context.Context) (err error) {
		out, err = work(ctx, job)
		return err
	})
	c.worked.fire()
	if err != nil {
		return c.orchestrate(ctx, lifecycle.JobNotebookLMCall, sctx, err)
	}
	return c.endWith(ctx, job, out, c.r.jointArtifact)
}

// endWith writes the job's artifact from out and commits the job:
// joint, in one commit (the artifact's create-only write, the record and
// its audit object); or, the artifact written first (writeArtifact), the
// record's commit after it. A joint commit refused by the artifact's
// condition (the job has one already: an earlier attempt's, or this
// claim's own whose commit's outcome was unknown) goes the second way,
// where the epochs decide.
func (c *Claim) endWith(ctx context.Context, job lifecycle.Job, out lifecycle.JobOutput, joint bool) (lifecycle.Job, error) {
	art, w, sctx, err := c.writeArtifact(ctx, job, out, joint)
	if errors.Is(err, lifecycle.ErrLeaseLost) {
		return c.Job(), err
	}
	if err != nil {
		return c.orchestrate(ctx, lifecycle.JobArtifactWrite, sctx, err)
	}
	got, err := c.commit(ctx, art, w)
	if errors.Is(err, errArtifactThere) {
		return c.endWith(ctx, job, out, false)
	}
	return got, err
}

// work runs a job of the general machine (docs/spec.md#extensions), picked
// up into RUNNING: its Handler once, then its artifact written and the
// commit RUNNING → COMPLETE, or the failure of either RUNNING →
// RETRY_BACKOFF (its failed_step RUNNING; an artifact write's error keeps
// its code ARTIFACT_WRITE_ERROR), or the Handler's Snooze RUNNING → QUEUED.
func (c *Claim) work(ctx context.Context, h Handler) (lifecycle.Job, error) {
	job := c.Job()
	var out lifecycle.JobOutput
	sctx, err := c.step(ctx, "Work", c.r.timeoutOf(job.JobType), func(ctx context.Context) (err error) {
		out, err = h.Work(ctx, job)
		return err
	})
	c.worked.fire()
	if wait, ok := snoozed(err); ok {
		return c.snooze(ctx, wait)
	}
	if err != nil {
		return c.orchestrate(ctx, lifecycle.JobRunning, sctx, err)
	}
	return c.endWith(ctx, job, out, c.r.jointArtifact)
}

// errArtifactThere: a joint commit of the job's end was refused by its
// artifact's create-only condition (endWith).
var errArtifactThere = errors.New("jobqueue: the job has an artifact already")

// orchestrate records the failure err of step (sctx the step's context)
// as the orchestration's, unless the claim lost its lease.
func (c *Claim) orchestrate(ctx context.Context, step lifecycle.JobState, sctx context.Context, err error) (lifecycle.Job, error) {
	if errors.Is(context.Cause(ctx), lifecycle.ErrLeaseLost) {
		return c.Job(), context.Cause(ctx)
	}
	code := errorCode(step, sctx, err)
	if ctx.Err() == nil {
		// Not stopping: the failure is recorded under the claim's own
		// context, waiting out an outage as long as the claim may.
		return c.fail(ctx, step, code, err.Error())
	}
	ectx, cancel := c.r.grace.after(ctx)
	defer cancel()
	return c.fail(ectx, step, code, err.Error())
}

// assembleContext runs the AssembleContext handler, if the job is to run
// it, and returns its snapshot and the step's context.
func (c *Claim) assembleContext(ctx context.Context, h Handlers, job lifecycle.Job) (json.RawMessage, context.Context, error) {
	if job.Status == lifecycle.JobNotebookLMCall {
		// Picked up by a Worker whose handlers assemble no context: the
		// pickup recorded snapshot_ready in the same write (see claimFor).
		return nil, nil, nil
	}
	if h.AssembleContext == nil {
		return nil, nil, nil
	}
	var snapshot json.RawMessage
	sctx, err := c.step(ctx, "AssembleContext", c.r.stepTimeout, func(ctx context.Context) (err error) {
		snapshot, err = h.AssembleContext(ctx, job)
		return err
	})
	if err != nil {
		// An abandoned handler may still be writing snapshot: not read.
		return nil, sctx, err
	}
	return snapshot, sctx, nil
}

// artifactType is the artifact type of a job of type t: the built-in
// mapping, or the user type's own name.
func artifactType(t lifecycle.JobType) artifact.Type {
	if a, ok := artifact.TypeForJob(t); ok {
		return a
	}
	return artifact.Type(t)
}

// writeArtifact creates the job's artifact from out, the ARTIFACT_WRITE
// step, and returns it with the step's context; joint, it writes nothing
// and returns the artifact's write too, for the commit (endWith).
func (c *Claim) writeArtifact(ctx context.Context, job lifecycle.Job, out lifecycle.JobOutput, joint bool) (artifact.Artifact, *storage.Write, context.Context, error) {
	// ARTIFACT_WRITE is not written on its own: the artifact write is the
	// queue's own quick step, and no reader acts on a job in it, so the
	// move NOTEBOOKLM_CALL → ARTIFACT_WRITE is recorded in the write that
	// ends the step (the commit, or the failure), with its own audit event.
	typ := artifactType(job.JobType)
	cid := c.r.project.of(job)
	// The artifact is fenced by the claim's epoch (artifact.Draft.Epoch):
	// a newer attempt's artifact is never replaced, a lost attempt's is;
	// and the lease is confirmed just before the write, so an attempt that
	// woke up after losing the job writes none (see confirm).
	var (
		art artifact.Artifact
		w   *storage.Write
	)
	sctx, err := c.step(ctx, "artifact write", c.r.stepTimeout, func(ctx context.Context) (err error) {
		if err := c.confirm(ctx); err != nil {
			return err
		}
		d := artifact.Draft{
			JobID: job.JobID, RunID: job.RunID, Type: typ, AgentSlug: job.AgentSlug,
			EntityRefs: out.EntityRefs, Tags: out.Tags, Content: out.Content, Sources: out.Sources,
			TenantID: job.TenantID, Epoch: c.epoch, Audited: true,
		}
		if joint {
			var cw storage.Write
			art, cw, err = c.r.artifacts.CreateWrite(c.r.artifactActor, cid, d)
			w = &cw
		} else {
			art, _, err = c.r.artifacts.Create(ctx, c.r.artifactActor, cid, d)
		}
		// A fresh create: its event goes in the job's audit object (a
		// replacement's the artifact store recorded itself). Reset first:
		// a joint write refused (endWith) comes here again.
		c.mu.Lock()
		c.artCreated = ""
		if err == nil && art.Version == 1 {
			c.artCreated = art.ArtifactID
		}
		c.mu.Unlock()
		switch {
		case err != nil:
		case !art.Finalized:
			err = fmt.Errorf("%w: %s", errNotFinalized, art.ArtifactID)
		case art.Epoch != c.epoch:
			err = fmt.Errorf("jobqueue: artifact %s of epoch %d, not the claim's %d", art.ArtifactID, art.Epoch, c.epoch)
		}
		return err
	})
	if err != nil {
		// An abandoned write may still be setting art: not read.
		return artifact.Artifact{}, nil, sctx, err
	}
	return art, w, sctx, nil
}

// commit writes COMPLETE, pointing at art, in the write that also records
// NOTEBOOKLM_CALL → ARTIFACT_WRITE (on the spec's machine); with aw (the
// artifact's write, not yet written), in one commit with it, or
// errArtifactThere. A job whose cancel was asked for meanwhile ends
// CANCELLED instead, its artifact written but not its result.
func (c *Claim) commit(ctx context.Context, art artifact.Artifact, aw *storage.Write) (lifecycle.Job, error) {
	var joint func(*jobDoc) ([]storage.Write, error)
	if aw != nil {
		joint = func(*jobDoc) ([]storage.Write, error) { return []storage.Write{*aw}, nil }
	}
	err := c.writeJoint(ctx, func(d *jobDoc, _ time.Time) error {
		if cancelAsked(d) {
			cancelRunning(ctx, d)
			d.AuditArtifact = c.artCreated
			d.RanEpoch = c.epoch
			return nil
		}
		if err := toArtifactWrite(ctx, d); err != nil {
			return err
		}
		if err := fire(ctx, d, machine.EventCommit, lifecycle.ActorOrchestration); err != nil {
			return err
		}
		d.ArtifactID, d.Error, d.ErrorCode, d.FailedStep, d.Lease = art.ArtifactID, nil, "", "", nil
		d.AuditArtifact = c.artCreated
		d.RanEpoch = c.epoch
		return nil
	}, joint)
	if aw != nil && refusedAt(err, aw.Key) {
		return c.Job(), errArtifactThere
	}
	if err == nil {
		c.settled()
	}
	if err != nil && !errors.Is(err, lifecycle.ErrLeaseLost) && ctx.Err() == nil {
		// The commit itself failed (a store error): a write error of
		// ARTIFACT_WRITE, retried like any other.
		return c.orchestrate(ctx, lifecycle.JobArtifactWrite, ctx, err)
	}
	return c.Job(), err
}
