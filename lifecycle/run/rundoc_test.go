package run_test

import (
	"context"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// The run document's fields beside the platform's (docs/spec.md#run-status):
// schema_version and updated_at on every write, trigger_source beside the
// flat trigger (the submit's source, else by trigger), requested_by on an
// approval gate, and a step's tokens_used in its step file.
func TestRunDocumentFields(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	used := &lifecycle.TokensUsed{Input: 1200, Output: 340}
	agent := run.Agent{Slug: "doc", Machine: lifecycle.MachineApproval, Steps: []run.Step{
		{Name: "draft", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{TokensUsed: used, Await: &run.Await{Approval: "ship"}}, nil
		}},
		okStep("ship"),
	}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	for _, tc := range []struct {
		req  lifecycle.SubmitRequest
		want lifecycle.TriggerSource
		by   string
	}{
		{req: lifecycle.SubmitRequest{AgentSlug: "doc", Source: "ui", Caller: lifecycle.Caller{UserID: "u-42"}}, want: lifecycle.TriggerSource{Source: "ui", UserID: "u-42"}, by: "u-42"},
		{req: lifecycle.SubmitRequest{AgentSlug: "doc", Trigger: "cron"}, want: lifecycle.TriggerSource{Source: "scheduled"}, by: "agent:doc"},
		{req: lifecycle.SubmitRequest{AgentSlug: "doc"}, want: lifecycle.TriggerSource{Source: "api"}, by: "agent:doc"},
	} {
		res, err := r.Submit(ctx, tc.req)
		if err != nil {
			t.Fatal(err)
		}
		created := status(t, r, res.RunID)
		if created.SchemaVersion != 1 || created.UpdatedAt == nil || !created.UpdatedAt.Equal(created.StartedAt) {
			t.Errorf("created: schema_version %d, updated_at %v; want %d, %v", created.SchemaVersion, created.UpdatedAt, 1, created.StartedAt)
		}
		st := g.wait(r, res.RunID, 0, 0)
		if st.Status != "awaiting_approval" || st.Approval == nil || st.Approval.RequestedBy != tc.by {
			t.Errorf("%+v: %s, approval %+v; want awaiting_approval requested by %s", tc.req, st.Status, st.Approval, tc.by)
		}
		g.clock.Advance(time.Minute)
		decided, err := r.Approve(ctx, res.RunID, lifecycle.ActorGateway, run.Decision{})
		if err != nil {
			t.Fatal(err)
		}
		if decided.UpdatedAt == nil || !decided.UpdatedAt.Equal(g.clock.Now()) {
			t.Errorf("approved: updated_at %v; want the approval's time %v", decided.UpdatedAt, g.clock.Now())
		}
		if st.TriggerSource == nil || *st.TriggerSource != tc.want {
			t.Errorf("%+v: trigger_source %+v; want %+v", tc.req, st.TriggerSource, tc.want)
		}
		steps, err := r.Steps(ctx, res.RunID)
		if err != nil || len(steps) == 0 || steps[0].TokensUsed == nil || *steps[0].TokensUsed != *used {
			t.Errorf("step file tokens_used: %+v (%v); want %+v", steps, err, used)
		}
	}
	if _, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "doc", Source: "fax"}); err == nil {
		t.Error("a submit with source fax was taken")
	}
}
