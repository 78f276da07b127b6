package lifecycle

import (
	"encoding/json"
	"time"

	"github.com/runconveyor/conveyor/storage"
)

// RunStatus is a run's status.json (seed 000 §3, seed 002 §2.4). Status holds
// a state of whichever run machine drives the run ([RunState],
// [CancelableRunState] or [ApprovalRunState]); Machine names that machine and
// is omitted for the canonical one. Times are RFC 3339 UTC.
//
// The seed's fields come first and are always present, so a plain run's
// status.json reads like the seed's examples; the fields the SDK adds (lease,
// heartbeat, cancellation, approval and external waits, resume count) are
// omitted while empty. The embedded storage.Meta adds the document's write
// counter, "version".
type RunStatus struct {
	RunID     string `json:"run_id"`
	AgentSlug string `json:"agent_slug"`
	Status    string `json:"status"`
	// Trigger is "manual", "cron" or "event".
	Trigger string `json:"trigger"`
	// StartedAt is when the run was requested.
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is null until the run ends.
	FinishedAt  *time.Time `json:"finished_at"`
	CurrentStep string     `json:"current_step"`
	StepsTotal  int        `json:"steps_total"`
	// StepsCompleted counts the steps whose files are written (seed 000 §1.4).
	StepsCompleted   int      `json:"steps_completed"`
	ProposalsCreated []string `json:"proposals_created"`
	// Error is "CODE: message" once the run failed, null otherwise.
	Error *string `json:"error"`

	storage.Meta

	Machine        string `json:"machine,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Lease is held by the runner executing the run (DESIGN.md §5).
	Lease           *Lease     `json:"lease,omitempty"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
	// Cancellation (seed 001 RunRecord).
	CancelRequested   bool       `json:"cancel_requested,omitempty"`
	CancelReason      string     `json:"cancel_reason,omitempty"`
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
	// Waits of the approval machine (seed 004 §2.2).
	Approval *Approval     `json:"approval,omitempty"`
	External *ExternalWait `json:"external,omitempty"`
	// ResumeCount counts takeovers after a runner was lost (seed 004 §6.2).
	ResumeCount int `json:"resume_count,omitempty"`
	// DurationMS is set when the run ends (seed 004 §2.3).
	DurationMS int64 `json:"duration_ms,omitempty"`
}

// Lease says which runner executes a run and until when (DESIGN.md §5): the
// SDK's one lease, storage.Lease. A runner renews it by heartbeat; another
// takes the run over only after ExpiresAt, with Epoch+1, which fences the
// first one out of every write.
type Lease = storage.Lease

// Approval is the approval a run waits for or got (seed 004 §2.2).
type Approval struct {
	Action      string     `json:"action"`
	RequestedAt time.Time  `json:"requested_at"`
	Decision    string     `json:"decision,omitempty"` // "approved" or "rejected"
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
	DecidedBy   string     `json:"decided_by,omitempty"`
	Reason      string     `json:"reason,omitempty"`
}

// ExternalWait is the external event a run waits for (seed 004 §2.2).
type ExternalWait struct {
	EventType string     `json:"event_type"`
	Since     time.Time  `json:"since"`
	Deadline  *time.Time `json:"deadline,omitempty"`
	// Filled when the event arrives.
	EventID    string     `json:"event_id,omitempty"`
	Source     string     `json:"source,omitempty"`
	ReceivedAt *time.Time `json:"received_at,omitempty"`
}

// RunStepRecord is one step file, steps/NN-name.json (seed 002 §2.5). The
// fields after Error are the step's checkpoint (seed 004 §5.2), which a
// resumed run uses to skip or replay the step; they are omitted when empty.
type RunStepRecord struct {
	StepNumber    int        `json:"step_number"`
	StepName      string     `json:"step_name"`
	Status        StepState  `json:"status"`
	StartedAt     *time.Time `json:"started_at,omitempty"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
	DurationMS    int64      `json:"duration_ms,omitempty"`
	OutputSummary string     `json:"output_summary,omitempty"`
	Error         string     `json:"error,omitempty"`

	Output     json.RawMessage `json:"output,omitempty"`
	Proposals  []string        `json:"proposals,omitempty"`
	Resumable  bool            `json:"resumable,omitempty"`
	Idempotent bool            `json:"idempotent,omitempty"`
	Attempts   int             `json:"attempts,omitempty"`
	// Epoch is the lease epoch of the runner that wrote the file.
	Epoch int64 `json:"epoch,omitempty"`
}

// Manifest is a finished run's manifest.json: its metadata and what it made.
type Manifest struct {
	RunID            string          `json:"run_id"`
	AgentSlug        string          `json:"agent_slug"`
	Status           string          `json:"status"`
	Trigger          string          `json:"trigger"`
	StartedAt        time.Time       `json:"started_at"`
	FinishedAt       time.Time       `json:"finished_at"`
	DurationMS       int64           `json:"duration_ms"`
	Steps            []ManifestStep  `json:"steps"`
	ProposalsCreated []string        `json:"proposals_created"`
	Outputs          []string        `json:"outputs,omitempty"`
	Input            json.RawMessage `json:"input,omitempty"`
	// Epoch is the lease epoch of the runner that wrote the manifest: a
	// runner of an older epoch cannot replace it (DESIGN.md §5).
	Epoch int64 `json:"epoch,omitempty"`
}

// ManifestStep summarises one step in the manifest.
type ManifestStep struct {
	StepNumber int       `json:"step_number"`
	StepName   string    `json:"step_name"`
	Status     StepState `json:"status"`
	DurationMS int64     `json:"duration_ms"`
}
