package lifecycle

import "time"

// RunStatus is a run's status.json (seed 000 §3, seed 002 §2.4). Status holds
// a state of whichever run machine drives the run: [RunState],
// [CancelableRunState] or [ApprovalRunState]. Times are RFC 3339 UTC.
type RunStatus struct {
	RunID       string     `json:"run_id"`
	AgentSlug   string     `json:"agent_slug"`
	Status      string     `json:"status"`
	Trigger     string     `json:"trigger"`
	StartedAt   *time.Time `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	CurrentStep string     `json:"current_step,omitempty"`
	StepsTotal  int        `json:"steps_total,omitempty"`
	// StepsCompleted counts the steps whose files are written (seed 000 §1.4).
	StepsCompleted   int      `json:"steps_completed"`
	ProposalsCreated []string `json:"proposals_created"`
	// Error is "CODE: message" once the run failed, null otherwise.
	Error *string `json:"error"`
}

// RunStepRecord is one step file, steps/NN-name.json (seed 002 §2.5). Status
// holds a [StepState].
type RunStepRecord struct {
	StepNumber    int        `json:"step_number"`
	StepName      string     `json:"step_name"`
	Status        StepState  `json:"status"`
	StartedAt     *time.Time `json:"started_at,omitempty"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
	DurationMS    int64      `json:"duration_ms,omitempty"`
	OutputSummary string     `json:"output_summary,omitempty"`
	Error         string     `json:"error,omitempty"`
}
