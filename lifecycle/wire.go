package lifecycle

import (
	"encoding/json"
	"time"
)

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
	// JobID is the job's id; empty means a fresh UUID of version 7.
	JobID     string
	RunID     string
	JobType   JobType
	AgentSlug string
	// MaxAttempts is max_attempts; 0 means the queue's Config.MaxAttempts.
	MaxAttempts int
	Payload     json.RawMessage
	Context     JobContext
	// Callback is an http or https URL, or empty: once the job is
	// COMPLETE, DEAD or CANCELLED the queue posts its result there, at
	// least once (jobqueue.CallbackBody, docs/spec.md#job-record).
	Callback string
	// ProjectID is the artifact's cid; empty means the queue's Config.Project.
	ProjectID string
	// Priority orders the jobs waiting in one lane: MinPriority (1) to
	// MaxPriority (9), a higher one started first, jobs of one priority
	// in the order they became ready; 0 means DefaultPriority (5).
	Priority int
	// RunAt is the earliest time the job may start; zero, or a time
	// already past, means at once. The job is QUEUED meanwhile.
	RunAt time.Time
	// Delay, not negative, is how long after the enqueue (by the queue's
	// clock) the job may start. With RunAt too, the later of the two.
	Delay time.Duration
	// Queue is the named queue a job without an agent runs in (paused and
	// resumed as one, its concurrency configured); empty means its type's
	// queue, else "default". A job that names an agent runs in its agent's
	// lane, in the queue "default".
	Queue string
	// Unique, when set, makes the job unique: an insert that finds a job
	// of the same uniqueness (Unique) in one of its states answers that
	// job, marked Duplicate, and creates none. The job's id is then
	// derived from its uniqueness, so JobID must be empty.
	Unique *Unique
}

// Unique says what makes a job the same as another (NewJob.Unique): its
// type and its key, or else its payload (as canonical JSON: key order and
// spacing do not matter), within one period of its run time, while the
// job holding it is in one of States. A job outside those states (by
// default DEAD or CANCELLED) lets a new one in.
type Unique struct {
	// Key, when set, is the job's uniqueness instead of its payload (at
	// most 1,024 bytes of one line of text).
	Key string
	// Period, when positive, makes the uniqueness last one period: the
	// run time's (the insert's time, or the later RunAt or Delay) period,
	// counted from the zero time in whole periods (an hour: from each full
	// hour, UTC). Zero: no end.
	Period time.Duration
	// States are the states of a job that hold its uniqueness; empty means
	// every state but DEAD and CANCELLED (a job waiting, running, retrying
	// or COMPLETE holds it; a buried or cancelled one does not).
	States []JobState
}

// The priorities of a job (NewJob.Priority, Job.Priority): a higher one
// starts first among the jobs waiting in one lane.
const (
	MinPriority     = 1
	MaxPriority     = 9
	DefaultPriority = 5
)

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
