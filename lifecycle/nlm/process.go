package nlm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
)

// errHandBack is the cause of a job's context when the processor shuts
// down: the job's lease is handed back for another processor to take.
var errHandBack = errors.New("nlm: processor stopping")

// held is one job this processor holds the lease of.
type held struct {
	p     *Processor
	rec   *fence.Record[jobDoc, *jobDoc] // fenced by (owner, epoch)
	jobID string
	req   lifecycle.NLMRequest
	// renewedAt is when the lease was last renewed (Unix ns): the
	// heartbeat is scheduled from it.
	renewedAt atomic.Int64
	finished  atomic.Bool
}

// Process picks up one job and runs it to DONE or ERROR, posting the
// callback: a job in ACCEPTED, a job whose lease was handed back, or one
// whose processor was lost (its lease lapsed; taken over with epoch+1 and
// resumed, or sent to ERROR after MaxTakeovers). It returns the job as it
// ended. An error means the job was not processed to its end here: its
// record is poison (a *lifecycle.QuarantinedError; it was quarantined), it is
// terminal (lifecycle.ErrTerminalState), another processor holds it, or
// this processor lost its lease meanwhile (lifecycle.ErrLeaseLost) or was
// stopped by ctx (the lease is then handed back). A stage's failure is not
// an error of Process: it is the job's ERROR.
func (p *Processor) Process(ctx context.Context, jobID string) (lifecycle.NLMJob, error) {
	key, err := layout.NLMJobKey(jobID)
	if err != nil {
		return lifecycle.NLMJob{}, err
	}
	h := &held{p: p, rec: p.record(key, jobID), jobID: jobID}
	var from lifecycle.NLMState
	var epoch int64
	_, after, err := h.rec.Apply(ctx, func(d *jobDoc) error {
		now := p.now()
		from = d.Status
		if terminal(d.Status) {
			return fmt.Errorf("%w: NLM job %s is %s", lifecycle.ErrTerminalState, jobID, d.Status)
		}
		if l := d.Lease; records.LeaseLive(l, now) {
			return &lifecycle.LeaseLostError{Key: key, Owner: p.cfg.Owner, Holder: l.Owner, HolderEpoch: l.Epoch}
		}
		epoch = 1
		if d.Lease != nil {
			epoch = d.Lease.Epoch + 1
		}
		if d.Status == lifecycle.NLMAccepted {
			if _, err := machine.NLMMachine().Fire(ctx, &d.NLMJob, machine.EventNLMFetchContext, lifecycle.ActorNLMBackend); err != nil {
				return err
			}
		} else if d.Lease == nil || d.Lease.Owner != "" {
			d.Takeovers++ // its processor was lost, not stopped
		}
		d.Lease = &lifecycle.Lease{Owner: p.cfg.Owner, Epoch: epoch, ExpiresAt: now.Add(p.cfg.LeaseTTL)}
		if now.After(d.UpdatedAt) {
			d.UpdatedAt = now
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, lifecycle.ErrTerminalState) {
			p.unmark(ctx, jobID)
		}
		cur, _ := h.rec.Snapshot()
		return cur.NLMJob, p.poisoned(ctx, err)
	}
	if after.Status != from {
		p.audit(ctx, &after, from)
	}
	h.rec.Owner, h.rec.Epoch, h.rec.Now = p.cfg.Owner, epoch, p.now
	h.req = *after.Request
	if h.req.ProjectID == "" {
		h.req.ProjectID = p.cfg.Project // a request Accept did not see
	}
	h.renewedAt.Store(p.now().UnixNano())

	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := fence.Heartbeat(jctx, p.cfg.Clock, p.cfg.LeaseTTL/3, h.lastRenewal, func(ctx context.Context) bool {
		if h.finished.Load() {
			return false
		}
		_, err := h.write(ctx, nil)
		switch {
		case errors.Is(err, lifecycle.ErrLeaseLost) && !h.finished.Load():
			cancel(err)
			return false
		case err != nil && ctx.Err() == nil:
			p.cfg.Logger.WarnContext(ctx, "nlm: heartbeat", "job_id", jobID, "err", err)
		}
		return true
	})
	defer stop()
	if after.Takeovers > p.cfg.MaxTakeovers {
		return h.fail(jctx, ctx, after.Status, fmt.Errorf("taken over %d times from lost processors (at most %d)", after.Takeovers, p.cfg.MaxTakeovers))
	}
	return h.pipeline(jctx, ctx, after.NLMJob)
}

func (h *held) lastRenewal() time.Time { return time.Unix(0, h.renewedAt.Load()) }

// write applies change to the job only while this processor's lease holds
// (the fence is checked by fence.Record inside the conditional write) and
// has not lapsed, renewing it; a nil change only renews. A move is audited.
func (h *held) write(ctx context.Context, change func(d *jobDoc) error) (lifecycle.NLMJob, error) {
	p := h.p
	var now time.Time
	before, after, err := h.rec.Apply(ctx, func(d *jobDoc) error {
		now = p.now()
		l := *d.Lease
		l.ExpiresAt = now.Add(p.cfg.LeaseTTL)
		d.Lease = &l // replace, never write through: the cached document shares pointers
		if change != nil {
			if err := change(d); err != nil {
				return err
			}
		}
		if now.After(d.UpdatedAt) {
			d.UpdatedAt = now
		}
		return nil
	})
	if err != nil {
		return after.NLMJob, p.poisoned(ctx, err)
	}
	if d := after.Lease; d != nil && d.Owner != "" {
		h.renewedAt.Store(now.UnixNano())
	}
	if before.Status != after.Status {
		p.audit(ctx, &after, before.Status)
	}
	return after.NLMJob, nil
}

// move fires event on the job if it is still in from (a job taken over
// may be past it: then only the lease is renewed), applying set after.
func (h *held) move(ctx context.Context, from lifecycle.NLMState, event lifecycle.Event, set func(*lifecycle.NLMJob)) (lifecycle.NLMJob, error) {
	return h.write(ctx, func(d *jobDoc) error {
		if d.Status != from {
			return nil
		}
		if _, err := machine.NLMMachine().Fire(ctx, &d.NLMJob, event, lifecycle.ActorNLMBackend); err != nil {
			return err
		}
		if set != nil {
			set(&d.NLMJob)
		}
		if terminal(d.Status) {
			d.Lease = nil
		}
		return nil
	})
}

// stage runs fn as one unit of the core under limit.
func stage[T any](ctx context.Context, h *held, s lifecycle.NLMState, limit time.Duration, fn func(ctx context.Context) (T, error)) (T, error) {
	return deadline.Do(ctx, h.p.units, "nlm "+h.jobID+" "+string(s), limit, fn)
}

// reached tells whether a job in cur has already passed s.
func reached(cur, s lifecycle.NLMState) bool {
	order := map[lifecycle.NLMState]int{}
	for i, st := range machine.NLMStates() {
		order[st] = i
	}
	return order[cur] > order[s]
}

// pipeline runs the stages from the first, replaying without moves the
// ones a job taken over is already past (their results are not stored),
// except that a job in CALLBACK only posts its callback again. jctx is the
// job's context (canceled when the lease is lost); ctx the caller's.
func (h *held) pipeline(jctx, ctx context.Context, job lifecycle.NLMJob) (lifecycle.NLMJob, error) {
	p, req := h.p, h.req
	var snapshot json.RawMessage
	var prompt string
	var answer json.RawMessage
	var art artifact.Artifact
	artifactID := job.ArtifactID
	type step struct {
		state lifecycle.NLMState
		run   func(ctx context.Context) error
	}
	steps := []step{
		{lifecycle.NLMFetchingContext, func(ctx context.Context) (err error) {
			if p.stages.FetchContext != nil {
				snapshot, err = stage(ctx, h, lifecycle.NLMFetchingContext, p.cfg.FetchTimeout, func(ctx context.Context) (json.RawMessage, error) {
					return p.stages.FetchContext(ctx, req)
				})
			}
			return err
		}},
		{lifecycle.NLMBuildingPrompt, func(ctx context.Context) (err error) {
			prompt = req.Query
			if p.stages.BuildPrompt != nil {
				prompt, err = stage(ctx, h, lifecycle.NLMBuildingPrompt, p.cfg.PromptTimeout, func(ctx context.Context) (string, error) {
					return p.stages.BuildPrompt(ctx, req, snapshot)
				})
			}
			return err
		}},
		{lifecycle.NLMQuery, func(ctx context.Context) (err error) {
			answer, err = stage(ctx, h, lifecycle.NLMQuery, p.cfg.QueryTimeout, func(ctx context.Context) (json.RawMessage, error) {
				return p.stages.Query(ctx, req, prompt)
			})
			return err
		}},
		{lifecycle.NLMStructuring, func(ctx context.Context) (err error) {
			art, err = stage(ctx, h, lifecycle.NLMStructuring, p.cfg.StructureTimeout, func(ctx context.Context) (artifact.Artifact, error) {
				return h.structure(ctx, answer)
			})
			artifactID = art.ArtifactID
			return err
		}},
	}
	events := map[lifecycle.NLMState]lifecycle.Event{}
	for _, t := range machine.NLMMachine().Transitions() {
		if t.To != lifecycle.NLMError {
			events[t.From] = t.Event
		}
	}
	if job.Status != lifecycle.NLMCallback || artifactID == "" {
		for _, s := range steps {
			if err := s.run(jctx); err != nil {
				return h.fail(jctx, ctx, s.state, err)
			}
			if reached(job.Status, s.state) {
				continue // replayed: the record is past this stage
			}
			var set func(*lifecycle.NLMJob)
			if s.state == lifecycle.NLMStructuring {
				set = func(j *lifecycle.NLMJob) { j.ArtifactID = artifactID }
			}
			var err error
			if job, err = h.move(jctx, s.state, events[s.state], set); err != nil {
				return h.interrupted(jctx, ctx, job, err)
			}
		}
	}
	if err := p.post(jctx, req.Callback, lifecycle.NLMCallbackBody{JobID: h.jobID, Status: callbackComplete, ArtifactID: artifactID}); err != nil {
		return h.fail(jctx, ctx, lifecycle.NLMCallback, err)
	}
	h.finished.Store(true)
	job, err := h.move(jctx, lifecycle.NLMCallback, machine.EventNLMCallbackSent, nil)
	if err != nil {
		return h.interrupted(jctx, ctx, job, err)
	}
	p.unmark(ctx, h.jobID)
	return job, nil
}

// structure is the STRUCTURING stage: the answer, structured when the
// stages say how, becomes the job's artifact.
func (h *held) structure(ctx context.Context, answer json.RawMessage) (artifact.Artifact, error) {
	p, req := h.p, h.req
	out := lifecycle.JobOutput{Content: answer}
	if p.stages.Structure != nil {
		var err error
		if out, err = p.stages.Structure(ctx, req, answer); err != nil {
			return artifact.Artifact{}, err
		}
	}
	typ, _ := artifact.TypeForJob(req.JobType)
	a, _, err := p.cfg.Artifacts.Create(ctx, lifecycle.ActorNLMBackend, req.ProjectID, artifact.Draft{
		JobID: req.JobID, RunID: req.RunID, Type: typ, AgentSlug: req.AgentSlug,
		EntityRefs: out.EntityRefs, Tags: out.Tags, Content: out.Content, Sources: out.Sources,
	})
	return a, err
}

// interrupted handles a write that failed: a lost lease or a stop.
func (h *held) interrupted(jctx, ctx context.Context, job lifecycle.NLMJob, err error) (lifecycle.NLMJob, error) {
	if cause := context.Cause(jctx); cause != nil && errors.Is(cause, lifecycle.ErrLeaseLost) {
		return job, cause
	}
	if ctx.Err() != nil && !errors.Is(err, lifecycle.ErrLeaseLost) {
		return h.handBack(ctx, job)
	}
	return job, err
}

// handBack gives up the lease of a job interrupted by the processor's
// stop, so another processor may take it at once (without counting a
// takeover), bounded by StopGrace.
func (h *held) handBack(ctx context.Context, job lifecycle.NLMJob) (lifecycle.NLMJob, error) {
	h.finished.Store(true)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.p.cfg.StopGrace)
	defer cancel()
	j, err := h.write(wctx, func(d *jobDoc) error {
		d.Lease = &lifecycle.Lease{Epoch: d.Lease.Epoch, ExpiresAt: h.p.now()}
		return nil
	})
	if err == nil {
		job = j
	}
	return job, fmt.Errorf("%w: %w", errHandBack, context.Cause(ctx))
}

// fail sends the job to ERROR for a stage's failure (an overrun is one)
// and posts the FAILED callback, unless the job was interrupted: its lease
// lost (nothing is written) or the processor stopping (the lease is handed
// back).
func (h *held) fail(jctx, ctx context.Context, s lifecycle.NLMState, cause error) (lifecycle.NLMJob, error) {
	if c := context.Cause(jctx); c != nil && errors.Is(c, lifecycle.ErrLeaseLost) {
		job, _ := h.rec.Snapshot()
		return job.NLMJob, c
	}
	if ctx.Err() != nil {
		job, _ := h.rec.Snapshot()
		return h.handBack(ctx, job.NLMJob)
	}
	p := h.p
	msg := string(s) + ": " + cause.Error()
	if len(msg) > codes.MaxTextBytes {
		msg = msg[:codes.MaxTextBytes]
	}
	h.finished.Store(true)
	job, err := h.write(jctx, func(d *jobDoc) error {
		if _, err := machine.NLMMachine().Fire(jctx, &d.NLMJob, machine.EventNLMError, lifecycle.ActorNLMBackend); err != nil {
			return err
		}
		d.Error, d.Lease = msg, nil
		return nil
	})
	if err != nil {
		return h.interrupted(jctx, ctx, job, err)
	}
	if perr := p.post(jctx, h.req.Callback, lifecycle.NLMCallbackBody{JobID: h.jobID, Status: callbackFailed, Error: msg}); perr != nil {
		p.cfg.Logger.WarnContext(ctx, "nlm: FAILED callback not delivered", "job_id", h.jobID, "err", perr)
	}
	p.unmark(ctx, h.jobID)
	return job, nil
}
