// Package wire holds the JSON bodies of the Worker's HTTP API that the
// server (adapters/httpapi) and its Go client (adapters/httpapi/client)
// both write or read, so the two cannot drift apart. Internal: users see
// the SDK's records, not these envelopes.
package wire

import (
	"encoding/json"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

// The request bodies, field names as in docs/http-api.md: the client
// encodes them, the server decodes them with its strict decoders.

// SubmitBody is a request body (docs/http-api.md).
type SubmitBody struct {
	AgentSlug string            `json:"agent_slug"`
	Trigger   string            `json:"trigger,omitempty"`
	Source    string            `json:"source,omitempty"`
	Input     json.RawMessage   `json:"input,omitempty"`
	UserID    string            `json:"user_id,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

// CancelBody is a request body (docs/http-api.md).
type CancelBody struct {
	Reason string `json:"reason,omitempty"`
}

// DecisionBody is a request body (docs/http-api.md).
type DecisionBody struct {
	DecidedBy string          `json:"decided_by,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
}

// EventBody is a request body (docs/http-api.md).
type EventBody struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Source  string          `json:"source,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// JobBody is a request body (docs/http-api.md).
type JobBody struct {
	JobID       string               `json:"job_id,omitempty"`
	RunID       string               `json:"run_id"`
	JobType     lifecycle.JobType    `json:"job_type"`
	AgentSlug   string               `json:"agent_slug"`
	MaxAttempts int                  `json:"max_attempts,omitempty"`
	Payload     json.RawMessage      `json:"payload,omitempty"`
	Context     lifecycle.JobContext `json:"context,omitzero"`
	Callback    string               `json:"callback,omitempty"`
	ProjectID   string               `json:"project_id,omitempty"`
	Priority    int                  `json:"priority,omitempty"`
	RunAt       time.Time            `json:"run_at,omitzero"`
	// Delay is a Go duration string ("90s").
	Delay string `json:"delay,omitempty"`
	// Queue is the named queue of a job without an agent; empty: its
	// type's, else "default".
	Queue string `json:"queue,omitempty"`
	// Unique makes the job unique (lifecycle.Unique).
	Unique *UniqueBody `json:"unique,omitempty"`
}

// UniqueBody is a job's uniqueness in a body (lifecycle.Unique): by key,
// else by payload; Period a Go duration string ("1h"); States, empty,
// every state but DEAD and CANCELLED.
type UniqueBody struct {
	Key    string               `json:"key,omitempty"`
	Period string               `json:"period,omitempty"`
	States []lifecycle.JobState `json:"states,omitempty"`
}

// BatchBody is POST /jobs/batch's body (docs/http-api.md): 1 to 10,000
// jobs, each as POST /jobs takes one.
type BatchBody struct {
	Jobs []JobBody `json:"jobs"`
}

// BatchAnswer is POST /jobs/batch's answer: the jobs created, in order.
type BatchAnswer struct {
	Jobs []lifecycle.Job `json:"jobs"`
}

// BatchErrorBody is POST /jobs/batch's error answer for a job at fault:
// the error form, the job's index and the jobs that landed, the batch's
// first ones (lifecycle.BatchError's Landed).
type BatchErrorBody struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Index   int             `json:"index"`
	Landed  []lifecycle.Job `json:"landed"`
}

// RestoreBody is a request body (docs/http-api.md).
type RestoreBody struct {
	QKey string `json:"qkey"`
}

// The answers the server writes and the client reads.

// SubmitAnswer is POST /agents/run's answer.
type SubmitAnswer struct {
	RunID     string `json:"run_id"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// RunInputAnswer is GET /runs/{runId}/input's answer: the input the run
// was submitted with, null for none.
type RunInputAnswer struct {
	RunID string          `json:"run_id"`
	Input json.RawMessage `json:"input"`
}

// InboxAnswer is POST /inbox/submit's answer.
type InboxAnswer struct {
	InboxID string               `json:"inbox_id"`
	Status  lifecycle.InboxState `json:"status"`
}

// The headers of the API that the client sends and the server reads.
const (
	// ActorHeader names the actor of a request when the server has no
	// tokens (loopback only).
	ActorHeader = "X-Conveyor-Actor"
	// IdempotencyKeyHeader carries a submit's idempotency key
	// (docs/spec.md#idempotency).
	IdempotencyKeyHeader = "X-Idempotency-Key"
	// RequestIDHeader is the idempotency key of a submit without
	// IdempotencyKeyHeader.
	RequestIDHeader = "X-Request-ID"
)

// BulkBody is the body of a bulk action on jobs (POST /jobs/requeue):
// the filters of GET /jobs, the most jobs to act on (1 to 100; 0: 100)
// and the cursor of the set's rest, from the answer before (or from a
// page of GET /jobs with the same filters).
type BulkBody struct {
	Status lifecycle.JobState `json:"status,omitempty"`
	Type   lifecycle.JobType  `json:"type,omitempty"`
	Agent  string             `json:"agent,omitempty"`
	Limit  int                `json:"limit,omitempty"`
	Cursor string             `json:"cursor,omitempty"`
}

// ProposalDecisionBody is POST /proposals/{id}/decision's body
// (docs/http-api.md): status "applied" or "rejected", and an optional
// reason.
type ProposalDecisionBody struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}
