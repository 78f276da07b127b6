package lifecycle

import (
	"encoding/json"
	"fmt"
	"time"
)

// JobState is a state of the job machine (docs/spec.md#job-lifecycle).
type JobState string

// States of the job machine, spelled as the platform spells them.
const (
	JobPending         JobState = "PENDING"
	JobQueued          JobState = "QUEUED"
	JobContextAssembly JobState = "CONTEXT_ASSEMBLY"
	JobNotebookLMCall  JobState = "NOTEBOOKLM_CALL"
	JobArtifactWrite   JobState = "ARTIFACT_WRITE"
	JobComplete        JobState = "COMPLETE"
	JobRetryBackoff    JobState = "RETRY_BACKOFF"
	JobFailed          JobState = "FAILED"
	JobDead            JobState = "DEAD"
	// JobRunning and JobCancelled are states of the general job machine
	// only, the one a job of a type of the user's runs on (an extension,
	// docs/spec.md#extensions): RUNNING is its one pipeline state, where
	// the type's Handler works; CANCELLED ends a job an operator cancelled.
	JobRunning   JobState = "RUNNING"
	JobCancelled JobState = "CANCELLED"
)

// JobMachineGeneral names the general job machine in a job record's
// machine field: PENDING → QUEUED → RUNNING → COMPLETE, RETRY_BACKOFF,
// FAILED → DEAD, requeue and CANCELLED. A job type of the user's runs on
// it; the three NLM types run on the spec's ("job"), and so does a record
// without the field (written before it existed).
const JobMachineGeneral = "general-job"

// JobType is what a job produces (docs/spec.md#job-record).
type JobType string

// The platform's job types (docs/spec.md#platform-names).
const (
	JobResearch           JobType = "RESEARCH"
	JobBrief              JobType = "BRIEF"
	JobProposalPreprocess JobType = "PROPOSAL_PREPROCESS"
)

// JobContext is the context a job is assembled from (docs/spec.md#job-record).
type JobContext struct {
	MemorySnapshotURL string   `json:"memory_snapshot_url,omitempty"`
	EntityRefs        []string `json:"entity_refs,omitempty"`
}

// Job is a job record, jobs/{job_id}.json (docs/spec.md#job-record).
//
// Attempt counts the attempts started: the pickup (QUEUED →
// CONTEXT_ASSEMBLY, or QUEUED → RUNNING on the general machine) increments it, so a job that failed its first attempt sits in
// RETRY_BACKOFF with Attempt 1. It is retried while Attempt < MaxAttempts.
type Job struct {
	JobID       string          `json:"job_id"`
	RunID       string          `json:"run_id"`
	JobType     JobType         `json:"job_type"`
	AgentSlug   string          `json:"agent_slug"`
	Status      JobState        `json:"status"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Context     JobContext      `json:"context"`
	Callback    string          `json:"callback,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	ArtifactID  string          `json:"artifact_id,omitempty"`
	Error       *string         `json:"error"`

	// Fields Conveyor adds (docs/spec.md#records), omitted when empty.

	// Machine names the job machine the job runs on ("job", the spec's, or
	// JobMachineGeneral), set when it is enqueued; empty (a record written
	// before the field existed) is the spec's.
	Machine string `json:"machine,omitempty"`
	// TenantID is the job's tenant (docs/spec.md#tenants): the tenant its
	// insert acted for; empty for the default tenant, and in every record
	// written before tenants.
	TenantID string `json:"tenant_id,omitempty"`
	// CancelRequestedAt is when an operator asked to cancel the job while
	// it ran (RUNNING); its worker ends it CANCELLED. CancelRequestedBy
	// is who asked.
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
	CancelRequestedBy Actor      `json:"cancel_requested_by,omitempty"`
	// ProjectID is the cid its artifact is stored under
	// (projects/{cid}/artifacts/); empty means the Queue's Config.Project.
	ProjectID string `json:"project_id,omitempty"`
	// ErrorCode classifies Error: TIMEOUT, RATE_LIMITED (429), UNAVAILABLE
	// (503), HTTP_<status>, ARTIFACT_WRITE_ERROR, LEASE_EXPIRED,
	// HANDLER_ERROR, PERMANENT or CANCELLED.
	ErrorCode string `json:"error_code,omitempty"`
	// FailedStep is the pipeline state the last error happened in.
	FailedStep JobState `json:"failed_step,omitempty"`
	// QueuedAt is when the job last entered QUEUED (alerts: QUEUED > 5 min).
	QueuedAt *time.Time `json:"queued_at,omitempty"`
	// NextAttemptAt is when a job in RETRY_BACKOFF may be picked up again.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	// Priority is the job's priority (NewJob.Priority), 1 to 9; 0 (omitted)
	// is DefaultPriority, as for every job stored before priorities.
	Priority int `json:"priority,omitempty"`
	// ScheduledAt is the earliest time the job was to start, when its
	// enqueue asked for a later time than its creation (NewJob.RunAt,
	// NewJob.Delay): a QUEUED job is not started before it.
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
	// ReadyKey is the job's entry in its agent's ready lane, while it is
	// QUEUED or in RETRY_BACKOFF.
	ReadyKey string `json:"ready_key,omitempty"`
	// Lease is held by the worker running the job (a pipeline state): its
	// owner, the fencing epoch of the agent lock it was taken under, and its
	// expiry. Every write by the worker is conditional on owner and epoch
	// still being here, so a worker that was taken over cannot write.
	Lease *Lease `json:"lease,omitempty"`
	// Trail lists the transitions not yet in the audit log: those since
	// the job last came to rest (COMPLETE, DEAD, RETRY_BACKOFF), and, at
	// rest, those that brought it there, unless the store committed the
	// record with their audit object (DEAD keeps them). The write that
	// brings a job to rest writes them as one audit object; a later
	// writer, or Sweep, writes it should that writer have died before it did.
	Trail []JobMove `json:"trail,omitempty"`
	// TraceParent is the W3C traceparent of the enqueue that created the
	// job: every worker that runs it starts its spans as its children
	// (docs/spec.md#tracing). Empty when the enqueue carried no trace.
	TraceParent string `json:"traceparent,omitempty"`
	// Duplicate is set only in the answer to an insert of a unique job
	// (NewJob.Unique) that found this job holding its uniqueness, and
	// created none; it is never stored.
	Duplicate bool `json:"duplicate,omitempty"`
}

// JobMove is one transition of a job, as its audit event records it.
type JobMove struct {
	From  JobState `json:"from"`
	To    JobState `json:"to"`
	Event Event    `json:"event"`
	Actor Actor    `json:"actor"`
	// At is when the move was made: the time of the write that made it,
	// and the ts of its audit event.
	At time.Time `json:"at,omitzero"`
	// ErrorCode and Error are the failure a move into RETRY_BACKOFF (a
	// failed attempt) was made for, so each attempt keeps its own error
	// in the audit log; empty on any other move and on moves written
	// before they were recorded.
	ErrorCode string `json:"error_code,omitempty"`
	Error     string `json:"error,omitempty"`
}

// String makes a job readable in logs.
func (j *Job) String() string {
	return fmt.Sprintf("job %s (%s, attempt %d/%d)", j.JobID, j.Status, j.Attempt, j.MaxAttempts)
}

// JobCancelError is the refusal of a cancel (jobqueue.Queue.Cancel, POST
// /jobs/{job_id}/cancel): the job has finished (it matches ErrJobFinished,
// code JOB_FINISHED) or runs on the spec's machine, which has no cancel
// (ErrJobNotCancellable, JOB_NOT_CANCELLABLE). Both answer 409.
type JobCancelError struct {
	JobID   string
	Status  JobState
	Machine string
	// Finished tells which of the two: the job has finished.
	Finished bool
}

// Error names the job, its state and why it cannot be cancelled.
func (e *JobCancelError) Error() string {
	if e.Finished {
		return fmt.Sprintf("jobqueue: job %s is %s: finished, nothing to cancel", e.JobID, e.Status)
	}
	return fmt.Sprintf("jobqueue: job %s runs on the %s machine, which has no cancel (%s)", e.JobID, e.Machine, e.Status)
}

// Is matches ErrJobFinished or ErrJobNotCancellable.
func (e *JobCancelError) Is(target error) bool {
	if e.Finished {
		return target == ErrJobFinished
	}
	return target == ErrJobNotCancellable
}

// Code is JOB_FINISHED or JOB_NOT_CANCELLABLE.
func (e *JobCancelError) Code() string {
	if e.Finished {
		return codeJobFinished
	}
	return codeJobNotCancellable
}
