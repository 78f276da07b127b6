package lifecycle

import (
	"encoding/json"
	"time"
)

// The run's records and the submit's wire types: the Runner (lifecycle/run)
// writes and takes them, the HTTP API and its Go client move them; they
// live here so the client needs no engine.

// RunStatus is a run's status.json (docs/spec.md#run-status). RunStatus holds
// a state of whichever run machine drives the run (docs/spec.md#canonical-run,
// #cancel-aware-run, #approval-run); Machine names that machine and
// is omitted for the canonical one. Times are RFC 3339 UTC.
//
// The platform's fields come first and are always present, so a plain run's
// status.json reads as the platform expects; the fields the SDK adds (lease,
// heartbeat, cancellation, approval and external waits, resume count and
// takeover) are
// omitted while empty. The embedded Meta adds the document's write
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
	// StepsCompleted counts the steps whose files are written.
	StepsCompleted   int      `json:"steps_completed"`
	ProposalsCreated []string `json:"proposals_created"`
	// Error is "CODE: message" once the run failed, null otherwise.
	Error *string `json:"error"`

	Meta

	Machine        string `json:"machine,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// TenantID is the run's tenant (docs/spec.md#tenants); empty for the
	// default tenant, and in every record written before tenants.
	TenantID string `json:"tenant_id,omitempty"`
	// Lease is held by the runner executing the run (docs/spec.md#recovery): the
	// SDK's one lease. A runner renews it by heartbeat; another takes the
	// run over only after ExpiresAt, with Epoch+1, which fences the first
	// one out of every write.
	Lease           *Lease     `json:"lease,omitempty"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
	// Cancellation (docs/spec.md#cancel-aware-run).
	CancelRequested   bool       `json:"cancel_requested,omitempty"`
	CancelReason      string     `json:"cancel_reason,omitempty"`
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
	// Waits of the approval machine (docs/spec.md#approval-run).
	Approval *Approval     `json:"approval,omitempty"`
	External *ExternalWait `json:"external,omitempty"`
	// CompensationLog lists the compensations run so far, in the order
	// they ran (docs/spec.md#compensation): written as each ends while the
	// run is compensating, complete in the terminal status.
	CompensationLog []CompensationEntry `json:"compensation_log,omitempty"`
	// ResumeCount counts takeovers after a runner was lost (docs/spec.md#recovery).
	ResumeCount int `json:"resume_count,omitempty"`
	// TakenOverAt is when a runner last took the run over (the claim that
	// counted ResumeCount): kept once written, so a finished run still says
	// its first runner was lost (docs/spec.md#recovery).
	TakenOverAt *time.Time `json:"taken_over_at,omitempty"`
	// RunnerLostAt is never stored: a read sets it, to the lapsed lease's
	// expiry, while the run is executing under a lease that expired by the
	// reader's clock and no runner has taken it over yet (an orphan the
	// next claim resumes). The status writer drops it.
	RunnerLostAt *time.Time `json:"runner_lost_at,omitempty"`
	// QueuePosition is never stored: a read of one run's status sets it
	// while the run is queued for a slot, to its place among its agent's
	// runs waiting (1: the next to start; docs/spec.md#run-status says how
	// exact). Lists and waits leave it unset.
	QueuePosition int `json:"queue_position,omitempty"`
	// DurationMS is set when the run ends.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// TraceParent is the W3C traceparent of the submit that created the
	// run (the caller's trace, continued): every runner that executes the
	// run, a takeover's too, starts its spans as its children
	// (docs/spec.md#tracing). Empty when the submit carried no trace.
	TraceParent string `json:"traceparent,omitempty"`
	// SchemaVersion is the document's layout version, 1 when written; a
	// document without it was written before it was kept
	// and reads as version 1 (docs/spec.md#run-status).
	SchemaVersion int `json:"schema_version,omitempty"`
	// UpdatedAt is the time of the write that made this version.
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	// TriggerSource says who or what asked for the run, beside the flat
	// Trigger the platform's readers take.
	TriggerSource *TriggerSource `json:"trigger_source,omitempty"`
	// RepoID, PRID and PRURL name the repository and pull request of a
	// run a repository's webhook started: the run is listed under its
	// repository, newest first.
	RepoID string `json:"repo_id,omitempty"`
	PRID   string `json:"pr_id,omitempty"`
	PRURL  string `json:"pr_url,omitempty"`
	// LastAudit is the audit event of the write that made this version of
	// the document. The writer puts it in the audit log right after the
	// write; should that fail (or the writer die first), the run's next
	// writer or a poll finds it missing there and writes it, so every
	// status write has its audit event.
	LastAudit *RunAuditRecord `json:"last_audit,omitempty"`
}

// TriggerSource is who or what asked for a run.
type TriggerSource struct {
	// Source is "ui", "cli", "webhook", "scheduled" or "api".
	Source string `json:"source"`
	// UserID is the user the submit was made for, if named.
	UserID string `json:"user_id,omitempty"`
	// WebhookEventID is the delivery id of the webhook event that
	// started the run.
	WebhookEventID string `json:"webhook_event_id,omitempty"`
}

// TokensUsed counts the model tokens a step used, when it says.
type TokensUsed struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// RunAuditRecord is an audit event and its id in the audit log: the id is
// derived from the run and the document's version, so every writer that
// writes it writes the same object once.
type RunAuditRecord struct {
	ID    string     `json:"id"`
	Event AuditEvent `json:"event"`
}

// StepRecord is one step file, steps/NN-name.json (docs/spec.md#step-record). The
// fields after Error are the step's checkpoint (docs/spec.md#checkpoint), which a
// resumed run uses to skip or replay the step; they are omitted when empty.
type StepRecord struct {
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
	// After and Next are a graph agent's (absent for a linear one): the
	// steps this one depends on, and the successors it chose to run.
	After []string `json:"after,omitempty"`
	Next  []string `json:"next,omitempty"`
	// TokensUsed is what the step reported it used (StepOutput).
	TokensUsed *TokensUsed `json:"tokens_used,omitempty"`
}

// SubmitRequest asks for a run (POST /agents/run).
type SubmitRequest struct {
	AgentSlug string
	// Trigger is "manual" (the default), "cron" or "event".
	Trigger string
	// Input is handed to every step; it must be valid JSON when set.
	Input json.RawMessage
	// IdempotencyKey, when set, makes a repeated submit return the first
	// run (docs/spec.md#idempotency). Its schemes:
	// github:{delivery_id}, api:{client_id}:{request_id},
	// slack:{team_id}:{trigger_id}, scheduler:{schedule_id}:{execution_time}.
	IdempotencyKey string
	// Source is "ui", "cli", "webhook", "scheduled" or "api"; empty
	// means by Trigger (cron: scheduled, event: webhook, else api).
	Source string
	// WebhookEventID is the delivery id of the event that started the run.
	WebhookEventID string
	// RepoID, PRID and PRURL name the repository ("owner/name") and the
	// pull request a webhook run is about; a run with RepoID is listed
	// under its repository.
	RepoID, PRID, PRURL string
	// Caller is the context of the run's creation (the initiator defaults
	// by Trigger).
	Caller
}

// SubmitResult answers a submit.
type SubmitResult struct {
	RunID string
	// Duplicate is true when an idempotency key matched an earlier submit,
	// whose run this is.
	Duplicate bool
}

// Caller is the caller's part of a control call's transition context
// (docs/spec.md#transition-context): on whose behalf the call is made, what caused it, and
// anything the audit log should keep about it. Every control call's
// request embeds one; the Runner adds the rest of the context (run id,
// timestamp, approval and external-event details) and writes it into the
// audit event and the run_transition log line, and a refused move reports
// it (*InvalidTransitionError's Context). A call whose Caller
// breaks the limits of TransitionContext.Check (UserID
// MaxNameBytes, metadata keys MaxNameBytes and values MaxTextBytes, at
// most MaxListLen entries, clean text, an Initiator of the known set) is
// refused with an *lifecycle.InputError, and nothing is written.
type Caller struct {
	// UserID names the user the call is made for, e.g. "u-42".
	UserID string
	// Initiator says what caused the call. Default: Submit by its trigger
	// (manual: user, cron: system, event: webhook), Cancel user, Approve
	// and Reject approval, Deliver webhook.
	Initiator Initiator
	// Metadata is kept as given in the audit event and the log line.
	Metadata map[string]string
}
