package lifecycle

import "encoding/json"

// The wire types of the queue and the inbox that the Go client sends and
// reads: they live here so the client needs no engine. jobqueue.NewJob is
// defined on NewJob (with its checks); the inbox takes InboxSubmission and
// answers InboxStats itself.

// NewJob is what jobqueue.Queue.Enqueue needs (POST /jobs); the queue fills
// in the rest of the record.
// Ids are storage ids (storage.ErrInvalidID); Payload is JSON of at most
// 1 MiB, the URLs at most 4,096 bytes, and
// Context.EntityRefs at most 256 refs of
// 1,024 bytes, all valid UTF-8 without NUL or control characters.
type NewJob struct {
	// JobID is the job's id; empty means a fresh UUID v4.
	JobID     string
	RunID     string
	JobType   JobType
	AgentSlug string
	// MaxAttempts is max_attempts; 0 means the queue's Config.MaxAttempts.
	MaxAttempts int
	Payload     json.RawMessage
	Context     JobContext
	// Callback is an http or https URL, or empty.
	Callback string
	// ProjectID is the artifact's cid; empty means the queue's Config.Project.
	ProjectID string
}

// InboxSubmission is the body of POST /inbox/submit: an entry before the
// validation gate. ID may be empty (a fresh id is drawn); status,
// created_at and the outcome fields are the Box's to set (its Submit runs
// the validation gate).
type InboxSubmission struct {
	ID       string        `json:"id,omitempty"`
	Source   InboxSource   `json:"source"`
	Intent   InboxIntent   `json:"intent"`
	Metadata InboxMetadata `json:"metadata"`
}

// InboxStats counts entries by state (GET /inbox/stats).
type InboxStats struct {
	Pending   int `json:"pending"`
	Processed int `json:"processed"`
	Rejected  int `json:"rejected"`
	Expired   int `json:"expired"`
	Total     int `json:"total"`
}
