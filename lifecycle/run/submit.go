package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"go.opentelemetry.io/otel/trace"
)

// submission checks a submit and hands it to the creator, or to the
// idempotency flow when it carries a key.
type submission struct {
	now     func() time.Time
	tracer  tracing.Tracer
	cat     *catalog
	creator *creator
	idem    *idempotency
}

// submit: see Runner.Submit.
func (s *submission) submit(ctx context.Context, req lifecycle.SubmitRequest) (res lifecycle.SubmitResult, err error) {
	ctx, span := s.tracer.Start(ctx, tracing.SpanSubmit, trace.SpanKindInternal)
	defer func() {
		span.String(tracing.AttrAgent, req.AgentSlug)
		span.String(tracing.AttrRunID, res.RunID)
		span.End(err)
	}()
	if err := checkSubmit(&req); err != nil {
		return lifecycle.SubmitResult{}, err
	}
	agent, ok := s.cat.agents[req.AgentSlug]
	if !ok {
		return lifecycle.SubmitResult{}, &RequestError{Field: "agent_slug", Reason: fmt.Sprintf("unknown agent %q", req.AgentSlug)}
	}
	switch req.Trigger {
	case "":
		req.Trigger = triggerManual
	case triggerManual, triggerCron, triggerEvent:
	default:
		return lifecycle.SubmitResult{}, &RequestError{Field: "trigger", Reason: fmt.Sprintf("%q is not manual, cron or event", req.Trigger)}
	}
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		return lifecycle.SubmitResult{}, &RequestError{Field: "input", Reason: "not valid JSON"}
	}
	if req.IdempotencyKey != "" {
		return s.idem.submit(ctx, agent, req)
	}
	runID := newRunID(s.now())
	if err := s.creator.createRun(ctx, agent, req, runID, time.Time{}); err != nil {
		return lifecycle.SubmitResult{}, err
	}
	return lifecycle.SubmitResult{RunID: runID}, nil
}

// newRunID makes an id like run_2026-02-14_080000_abc123 (docs/spec.md#run-status): it
// sorts by time, and 40 random bits make two runs of one second distinct.
func newRunID(now time.Time) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "run_" + now.UTC().Format("2006-01-02_150405") + "_" + hex.EncodeToString(b[:])
}

// activeEntry is the body of a run's active index entry: the run's first
// status.json and what its submit knew, so that a poll can finish the
// submit if it stopped before writing the status (finishSubmit).
type activeEntry struct {
	Pending *lifecycle.RunStatus         `json:"pending,omitempty"`
	Input   bool                         `json:"input,omitempty"` // the run has an input.json
	Actor   lifecycle.Actor              `json:"actor,omitempty"`
	Context *lifecycle.TransitionContext `json:"context,omitempty"`
}
