package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// The demo agents, so that every endpoint and the page have something to
// show on a fresh machine.
const (
	// AgentResearch runs three steps of a few seconds each and completes.
	AgentResearch = "demo-research"
	// AgentApproval runs a step, waits for an owner's approval, then
	// publishes (the approval run machine).
	AgentApproval = "demo-approval"
	// AgentNLM asks the in-process NLM backend simulator and waits for its
	// callback (docs/spec.md#nlm-job-lifecycle, through nlm.Ask).
	AgentNLM = "demo-nlm"
)

// demoAgents returns the demo agents, conc runs of each at once; pause is
// how long each demo step takes (a few seconds by default, so a run can be
// watched live).
func demoAgents(clk clock.Clock, pause time.Duration, conc int, p *nlm.Processor) []run.Agent {
	// activity.Sleep tells a fake clock the step waits (activity.Activity).
	wait := func(ctx context.Context) error { return activity.Sleep(ctx, clk, pause) }
	step := func(name, summary string) run.Step {
		return run.Step{Name: name, Idempotent: true, Resumable: true,
			Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				if err := wait(ctx); err != nil {
					return run.StepOutput{}, err
				}
				return run.StepOutput{Summary: summary}, nil
			}}
	}
	research := run.Agent{Slug: AgentResearch, Concurrency: conc, Steps: []run.Step{
		step("load-context", "context loaded"),
		step("nlm-query", "notebook answered"),
		{Name: "create-proposal", Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			if err := wait(ctx); err != nil {
				return run.StepOutput{}, err
			}
			id := "prop_" + in.RunID
			body, _ := json.Marshal(map[string]string{"proposal_id": id, "run_id": in.RunID})
			return run.StepOutput{Summary: "proposal created", Proposals: []string{id},
				Files: map[string][]byte{"proposal.json": body}}, nil
		}},
	}}
	approval := run.Agent{Slug: AgentApproval, Machine: lifecycle.MachineApproval, Concurrency: conc, Steps: []run.Step{
		{Name: "draft", Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			if err := wait(ctx); err != nil {
				return run.StepOutput{}, err
			}
			return run.StepOutput{Summary: "draft ready for review", Await: &run.Await{Approval: "publish"}}, nil
		}},
		step("publish", "published"),
	}}
	nlmAgent := run.Agent{Slug: AgentNLM, Machine: lifecycle.MachineApproval, Concurrency: conc,
		Steps: nlm.Ask(p, "ask-notebook", func(ctx context.Context, in run.StepInput) (lifecycle.NLMRequest, error) {
			q := "What changed this week?"
			if len(in.Input) > 0 {
				q = string(in.Input)
			}
			return lifecycle.NLMRequest{JobType: lifecycle.JobBrief, Query: q}, nil
		})}
	return []run.Agent{research, approval, nlmAgent}
}
