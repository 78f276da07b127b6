package run

import (
	"encoding/json"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage/records"
)

// Status is a run's status.json (seed 000 §3, seed 002 §2.4). Status holds
// a state of whichever run machine drives the run ([lifecycle.RunState],
// [lifecycle.CancelableRunState] or [lifecycle.ApprovalRunState]); Machine names that machine and
// is omitted for the canonical one. Times are RFC 3339 UTC.
//
// The seed's fields come first and are always present, so a plain run's
// status.json reads like the seed's examples; the fields the SDK adds (lease,
// heartbeat, cancellation, approval and external waits, resume count) are
// omitted while empty. The embedded records.Meta adds the document's write
// counter, "version".
type Status struct {
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

	records.Meta

	Machine        string `json:"machine,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Lease is held by the runner executing the run (DESIGN.md §5): the
	// SDK's one lease. A runner renews it by heartbeat; another takes the
	// run over only after ExpiresAt, with Epoch+1, which fences the first
	// one out of every write.
	Lease           *records.Lease `json:"lease,omitempty"`
	LastHeartbeatAt *time.Time     `json:"last_heartbeat_at,omitempty"`
	// Cancellation (seed 001 RunRecord).
	CancelRequested   bool       `json:"cancel_requested,omitempty"`
	CancelReason      string     `json:"cancel_reason,omitempty"`
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
	// Waits of the approval machine (seed 004 §2.2).
	Approval *lifecycle.Approval     `json:"approval,omitempty"`
	External *lifecycle.ExternalWait `json:"external,omitempty"`
	// ResumeCount counts takeovers after a runner was lost (seed 004 §6.2).
	ResumeCount int `json:"resume_count,omitempty"`
	// DurationMS is set when the run ends (seed 004 §2.3).
	DurationMS int64 `json:"duration_ms,omitempty"`
	// LastAudit is the audit event of the write that made this version of
	// the document. The writer puts it in the audit log right after the
	// write; should that fail (or the writer die first), the run's next
	// writer or a poll finds it missing there and writes it, so every
	// status write has its audit event.
	LastAudit *AuditRecord `json:"last_audit,omitempty"`
}

// AuditRecord is an audit event and its id in the audit log: the id is
// derived from the run and the document's version, so every writer that
// writes it writes the same object once.
type AuditRecord struct {
	ID    string             `json:"id"`
	Event records.AuditEvent `json:"event"`
}

// StepRecord is one step file, steps/NN-name.json (seed 002 §2.5). The
// fields after Error are the step's checkpoint (seed 004 §5.2), which a
// resumed run uses to skip or replay the step; they are omitted when empty.
type StepRecord struct {
	StepNumber    int                 `json:"step_number"`
	StepName      string              `json:"step_name"`
	Status        lifecycle.StepState `json:"status"`
	StartedAt     *time.Time          `json:"started_at,omitempty"`
	FinishedAt    *time.Time          `json:"finished_at,omitempty"`
	DurationMS    int64               `json:"duration_ms,omitempty"`
	OutputSummary string              `json:"output_summary,omitempty"`
	Error         string              `json:"error,omitempty"`

	Output     json.RawMessage `json:"output,omitempty"`
	Proposals  []string        `json:"proposals,omitempty"`
	Resumable  bool            `json:"resumable,omitempty"`
	Idempotent bool            `json:"idempotent,omitempty"`
	Attempts   int             `json:"attempts,omitempty"`
	// Epoch is the lease epoch of the runner that wrote the file.
	Epoch int64 `json:"epoch,omitempty"`
}

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
	// runner of an older epoch cannot replace it (DESIGN.md §5).
	Epoch int64 `json:"epoch,omitempty"`
}

// manifestStep summarises one step in the manifest.
type manifestStep struct {
	StepNumber int                 `json:"step_number"`
	StepName   string              `json:"step_name"`
	Status     lifecycle.StepState `json:"status"`
	DurationMS int64               `json:"duration_ms"`
}

// State is the run's status, a state of its machine: Status is a
// [lifecycle.Stateful] record of the run machines.
func (d *Status) State() string { return d.Status }

// SetState sets the run's status.
func (d *Status) SetState(s string) { d.Status = s }

// State is the step's status: StepRecord is a [lifecycle.Stateful] record
// of the run-step machine.
func (r *StepRecord) State() string { return string(r.Status) }

// SetState sets the step's status.
func (r *StepRecord) SetState(s string) { r.Status = lifecycle.StepState(s) }
