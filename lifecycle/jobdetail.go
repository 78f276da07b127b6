package lifecycle

import (
	"encoding/json"
	"time"
)

// JobHistory is a job with what happened to it (GET /jobs/{jobId}/history):
// the record, every move read from the audit log and the record's trail,
// and its attempts made from those moves.
type JobHistory struct {
	Job Job `json:"job"`
	// Moves are the job's transitions, oldest first.
	Moves []JobMove `json:"moves"`
	// Attempts are the job's runs by a worker, oldest first: each from the
	// move out of QUEUED (or RETRY_BACKOFF) to the move that ended it.
	Attempts []JobAttempt `json:"attempts"`
	// Result is the content of the job's artifact (its result), when it
	// has one the actor may read; absent otherwise.
	Result json.RawMessage `json:"result,omitempty"`
	// Partial tells that the audit log was not read to the end (the
	// listing's bound ran out, or the job lived longer than the days
	// read): older moves, and the attempts they made, may be missing.
	Partial bool `json:"partial,omitempty"`
}

// JobAttempt is one attempt at a job, as its moves show it.
type JobAttempt struct {
	// Attempt counts from 1 since the job's creation or last requeue.
	Attempt   int        `json:"attempt"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// DurationMS is EndedAt less StartedAt in milliseconds; absent while
	// the attempt runs.
	DurationMS *int64 `json:"duration_ms,omitempty"`
	// Outcome is the state the attempt ended in (COMPLETE, RETRY_BACKOFF,
	// FAILED, or QUEUED when requeued); empty while it runs.
	Outcome JobState `json:"outcome,omitempty"`
	// ErrorCode and Error are the failed attempt's (JobMove's), when
	// its move recorded them.
	ErrorCode string `json:"error_code,omitempty"`
	Error     string `json:"error,omitempty"`
}

// BulkResult is the answer of one action on a filtered set of jobs (POST
// /jobs/requeue): the jobs acted on, those that failed, and the cursor to
// go on from. One call acts on a bounded number of jobs; a caller goes on
// with Next until it is empty.
type BulkResult struct {
	// Count is len(JobIDs): how many jobs the action moved.
	Count  int      `json:"count"`
	JobIDs []string `json:"job_ids"`
	// Failed are the jobs the filter matched that the action refused or
	// could not write, each with its error code and message.
	Failed []BulkFailure `json:"failed"`
	// Next is the cursor of the rest of the set ("" when done).
	Next string `json:"next,omitempty"`
}

// BulkFailure is a job a bulk action did not move, and why.
type BulkFailure struct {
	JobID   string `json:"job_id"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// QueueLane is one lane of the job queue (GET /queues): an agent's, or a
// job type's when its jobs have no agent, with the work waiting in it and
// whether a job of it runs now. Read from the lanes and the lanes' locks,
// never from the jobs.
type QueueLane struct {
	Agent string `json:"agent"`
	// Queue is the named queue the lane belongs to: a job type's lane's
	// queue (NewJob.Queue), "default" for an agent's.
	Queue string `json:"queue"`
	// Paused tells that the lane's queue is paused: no job of it starts.
	Paused bool `json:"paused,omitempty"`
	// RunningJobs counts the lane's locks that hold a running job (a job
	// type's lane may run several jobs at once; an agent's runs one).
	RunningJobs int `json:"running_jobs,omitempty"`
	// Ready counts the jobs due now that no worker has picked up.
	Ready int `json:"ready"`
	// Waiting counts the jobs not due yet: in RETRY_BACKOFF still waiting,
	// or QUEUED to run later (NewJob.RunAt, Delay).
	Waiting int `json:"waiting"`
	// OldestReadyMS is how long the oldest ready job has waited, in
	// milliseconds (0 when none is ready).
	OldestReadyMS int64 `json:"oldest_ready_ms"`
	// Running tells that a worker holds the lane's lock: a job of it runs.
	Running bool `json:"running"`
	// JobID is the running job's id, when Running.
	JobID string `json:"job_id,omitempty"`
}

// JobCounts is how many jobs are in each state, per job type and agent
// (GET /stats/jobs/counts): the jobs in flight read from the queue's lanes and
// locks, the jobs at rest from the audit log's rollups, so the counts
// follow every move without reading the jobs that finished. Partial says
// that some work was left unread (in flight past the read's bound, or
// history not yet rolled up): the counts are then short, and the next
// read goes on.
type JobCounts struct {
	Rows []JobCountRow `json:"rows"`
	// Total is every row's counts added up.
	Total   map[JobState]int64 `json:"total"`
	AsOf    time.Time          `json:"as_of"`
	Partial bool               `json:"partial"`
}

// JobCountRow is the counts of one job type and agent (the agent "" for
// rows whose jobs' records are gone); Machine names the job machine its
// jobs run on (job, general-job).
type JobCountRow struct {
	// TenantID is the jobs' tenant (docs/spec.md#tenants): empty for the
	// default tenant. A caller sees its own tenant's rows, one of every
	// tenant every tenant's.
	TenantID  string             `json:"tenant_id,omitempty"`
	JobType   JobType            `json:"job_type"`
	AgentSlug string             `json:"agent_slug"`
	Machine   string             `json:"machine"`
	Counts    map[JobState]int64 `json:"counts"`
}

// JobActivity is the queue's last hour minute by minute (GET
// /stats/jobs/activity), read from the audit log's rollups and the objects of
// the minutes not yet rolled up: oldest minute first.
type JobActivity struct {
	Minutes []JobActivityMinute `json:"minutes"`
	Partial bool                `json:"partial"`
}

// JobActivityMinute is one minute of the queue's work: the jobs that
// completed, the attempts that failed (to RETRY_BACKOFF, or FAILED), the
// jobs cancelled, and the run time (pickup to rest) and wait (ready to
// pickup) of the attempts that ended in it, by percentile in ms, nil when
// none ended. A percentile is the upper bound of the histogram bucket it
// falls in (1, 2, 5, 10, 20, 50 ms, ... up to 10 min), above that the
// longest seen.
type JobActivityMinute struct {
	At        time.Time `json:"at"`
	Completed int       `json:"completed"`
	Failed    int       `json:"failed"`
	Cancelled int       `json:"cancelled"`
	RunP50MS  *int64    `json:"run_p50_ms,omitempty"`
	RunP95MS  *int64    `json:"run_p95_ms,omitempty"`
	WaitP95MS *int64    `json:"wait_p95_ms,omitempty"`
}
