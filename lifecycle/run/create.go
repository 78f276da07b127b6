package run

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// creator writes new runs (createRun) and records each creation.
type creator struct {
	store    *storage.Store
	now      func() time.Time
	log      *slog.Logger
	metrics  Metrics
	audit    *auditLog
	history  *history
	statuses *statuses
	writers  *writers
	changes  *changes
	inbox    *inbox
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
func (cr *creator) createRun(ctx context.Context, agent *agentDef, req SubmitRequest, runID string, started time.Time) error {
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
		started = cr.now()
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
	doc.LastAudit = cr.writers.auditRecord(&doc, "", b, 1)
	pending, err := json.Marshal(activeEntry{Pending: &doc, Input: len(req.Input) > 0, Actor: b.actor, Context: &b.tc})
	if err != nil {
		return err
	}
	if err := putOnce(ctx, cr.store, active, pending); err != nil {
		return err
	}
	entry, _ := json.Marshal(runIndexEntry{AgentSlug: agent.Slug, Machine: agent.Machine})
	if err := putOnce(ctx, cr.store, idxKey, entry); err != nil {
		return err
	}
	if err := cr.history.indexCreated(ctx, &doc); err != nil {
		return err
	}
	if len(req.Input) > 0 {
		inKey, err := layout.RunInputKey(agent.Slug, runID)
		if err != nil {
			return err
		}
		if err := putOnce(ctx, cr.store, inKey, req.Input); err != nil {
			return err
		}
	}
	ver, err := records.Create(ctx, cr.store, statusKey, &doc)
	created := err == nil
	if errors.Is(err, storage.ErrPreconditionFailed) {
		doc, ver, err = cr.statuses.read(ctx, agent.Slug, runID, statusKey)
	}
	if err != nil {
		return err
	}
	if created {
		cr.recordCreated(ctx, agent, &doc, b, "run_created")
	}
	w := cr.writers.newWriter(agent.Slug, runID, statusKey, &doc, ver)
	cr.inbox.hand(candidate{slug: agent.Slug, w: w, input: req.Input, inputKnown: true})
	return nil
}

// recordCreated records a run's creation: its audit event, metrics and log
// line (msg), and wakes every Wait.
func (cr *creator) recordCreated(ctx context.Context, agent *agentDef, doc *Status, b by, msg string) {
	cr.audit.write(ctx, doc)
	cr.metrics.RunTransition(agent.flow.machine, "", doc.Status)
	attrs := []slog.Attr{slog.String("runId", doc.RunID), slog.String("type", agent.Slug),
		slog.String("idempotencyKey", doc.IdempotencyKey), slog.String("initiator", string(b.tc.Initiator))}
	level := slog.LevelInfo
	if msg != "run_created" {
		level = slog.LevelWarn
	}
	cr.log.LogAttrs(ctx, level, msg, append(attrs, contextAttrs(&b.tc)...)...)
	cr.changes.broadcast()
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
