package run

import (
	"encoding/json"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

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
