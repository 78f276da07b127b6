package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// Submit creates a run in its machine's initial state (requested on the
// canonical machine), as the gateway, and hands it to this runner's loop.
// It writes nothing when the request is invalid: an *InputError for text
// over its limit (MaxNameBytes, MaxDocumentBytes for Input,
// MaxIdempotencyKeyBytes) or not clean UTF-8, a *RequestError otherwise.
//
// The run keeps the trace context of ctx (its span's W3C traceparent, in
// status.json): with Config.TracerProvider set, that of a conveyor.submit
// span started under the caller's; every execution continues it.
func (r *Runner) Submit(ctx context.Context, req SubmitRequest) (res SubmitResult, err error) {
	ctx, span := r.tracer.Start(ctx, tracing.SpanSubmit, trace.SpanKindInternal)
	defer func() {
		span.String(tracing.AttrAgent, req.AgentSlug)
		span.String(tracing.AttrRunID, res.RunID)
		span.End(err)
	}()
	if err := checkSubmit(&req); err != nil {
		return SubmitResult{}, err
	}
	agent, ok := r.agents[req.AgentSlug]
	if !ok {
		return SubmitResult{}, &RequestError{Field: "agent_slug", Reason: fmt.Sprintf("unknown agent %q", req.AgentSlug)}
	}
	switch req.Trigger {
	case "":
		req.Trigger = TriggerManual
	case TriggerManual, TriggerCron, TriggerEvent:
	default:
		return SubmitResult{}, &RequestError{Field: "trigger", Reason: fmt.Sprintf("%q is not manual, cron or event", req.Trigger)}
	}
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		return SubmitResult{}, &RequestError{Field: "input", Reason: "not valid JSON"}
	}
	if req.IdempotencyKey != "" {
		return r.submitIdempotent(ctx, agent, req)
	}
	runID := newRunID(r.now())
	if err := r.createRun(ctx, agent, req, runID, time.Time{}); err != nil {
		return SubmitResult{}, err
	}
	return SubmitResult{RunID: runID}, nil
}

// triggerInitiator is the initiator of a run's creation by its trigger.
func triggerInitiator(trigger string) lifecycle.Initiator {
	switch trigger {
	case TriggerCron:
		return lifecycle.InitiatorSystem
	case TriggerEvent:
		return lifecycle.InitiatorWebhook
	}
	return lifecycle.InitiatorUser
}

// newRunID makes an id like run_2026-02-14_080000_abc123 (docs/spec.md#run-status): it
// sorts by time, and 40 random bits make two runs of one second distinct.
func newRunID(now time.Time) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "run_" + now.UTC().Format("2006-01-02_150405") + "_" + hex.EncodeToString(b[:])
}

// createRun writes a new run: its active entry, index entry, input, status
// and audit event, in an order that leaves every run findable whatever
// write a crash stops at. The active entry comes first and carries the
// run's first status.json (activeEntry): from it, a poll finishes a submit
// that stopped before its status was written (finishSubmit), so no run is
// left half-made, and a run with a status always has the active entry that
// recovery looks through. Writing an existing run again (a duplicate of an
// idempotent submit) is a no-op for the parts already there: every key is
// written create-only, and started (zero: now) is the same for every
// writer of one run, so its index entries are the same keys.
func (r *Runner) createRun(ctx context.Context, agent *agentDef, req SubmitRequest, runID string, started time.Time) error {
	idxKey, err := layout.RunIndexKey(runID)
	if err != nil {
		return err
	}
	statusKey, err := layout.RunStatusKey(agent.Slug, runID)
	if err != nil {
		return err
	}
	active, err := layout.RunActiveKey(agent.Slug, runID)
	if err != nil {
		return err
	}
	if started.IsZero() {
		started = r.now()
	}
	doc := Status{
		RunID:            runID,
		AgentSlug:        agent.Slug,
		Status:           agent.flow.initial,
		Trigger:          req.Trigger,
		StartedAt:        started,
		StepsTotal:       len(agent.Steps),
		ProposalsCreated: []string{},
		IdempotencyKey:   req.IdempotencyKey,
		TraceParent:      tracing.TraceParent(ctx),
	}
	if agent.Machine != lifecycle.MachineCanonical {
		doc.Machine = agent.Machine
	}
	b := callerBy(&req.Caller, lifecycle.ActorGateway, triggerInitiator(req.Trigger))
	b.tc.RunID, b.tc.Timestamp = runID, doc.StartedAt
	doc.LastAudit = r.auditOf(&doc, "", b, 1)
	pending, err := json.Marshal(activeEntry{Pending: &doc, Input: len(req.Input) > 0, Actor: b.actor, Context: &b.tc})
	if err != nil {
		return err
	}
	if err := r.putOnce(ctx, active, pending); err != nil {
		return err
	}
	entry, _ := json.Marshal(runIndexEntry{AgentSlug: agent.Slug, Machine: agent.Machine})
	if err := r.putOnce(ctx, idxKey, entry); err != nil {
		return err
	}
	if err := r.indexCreated(ctx, &doc); err != nil {
		return err
	}
	if len(req.Input) > 0 {
		inKey, err := layout.RunInputKey(agent.Slug, runID)
		if err != nil {
			return err
		}
		if err := r.putOnce(ctx, inKey, req.Input); err != nil {
			return err
		}
	}
	ver, err := records.Create(ctx, r.store, statusKey, &doc)
	created := err == nil
	if errors.Is(err, storage.ErrPreconditionFailed) {
		doc, ver, err = r.readStatus(ctx, agent.Slug, runID, statusKey)
	}
	if err != nil {
		return err
	}
	if created {
		r.recordCreated(ctx, agent, &doc, b, "run_created")
	}
	w := r.newWriter(agent.Slug, runID, statusKey, &doc, ver)
	r.hand(candidate{slug: agent.Slug, w: w, input: req.Input, inputKnown: true})
	return nil
}

// activeEntry is the body of a run's active index entry: the run's first
// status.json and what its submit knew, so that a poll can finish the
// submit if it stopped before writing the status (finishSubmit).
type activeEntry struct {
	Pending *Status                      `json:"pending,omitempty"`
	Input   bool                         `json:"input,omitempty"` // the run has an input.json
	Actor   lifecycle.Actor              `json:"actor,omitempty"`
	Context *lifecycle.TransitionContext `json:"context,omitempty"`
}

// recordCreated records a run's creation: its audit event, metrics and log
// line (msg), and wakes every Wait.
func (r *Runner) recordCreated(ctx context.Context, agent *agentDef, doc *Status, b by, msg string) {
	r.writeAudit(ctx, doc)
	r.cfg.Metrics.RunTransition(agent.flow.machine, "", doc.Status)
	attrs := []slog.Attr{slog.String("runId", doc.RunID), slog.String("type", agent.Slug),
		slog.String("idempotencyKey", doc.IdempotencyKey), slog.String("initiator", string(b.tc.Initiator))}
	level := slog.LevelInfo
	if msg != "run_created" {
		level = slog.LevelWarn
	}
	r.log.LogAttrs(ctx, level, msg, append(attrs, contextAttrs(&b.tc)...)...)
	r.broadcast()
}

// putOnce writes value at key create-only; an existing key is left as is.
func (r *Runner) putOnce(ctx context.Context, key string, value []byte) error {
	_, err := r.store.Put(ctx, key, value, storage.IfNotExists())
	if errors.Is(err, storage.ErrPreconditionFailed) {
		return nil
	}
	return err
}
