package jobqueue

import (
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Metrics receives the job metrics of docs/spec.md#metrics (Config.Metrics).
// Implementations must be safe for concurrent use and fast: they are called
// on the write path, after the write they describe succeeded, so each
// write is counted once by the process that made it.
//
// A retry is the move RETRY_BACKOFF → QUEUED and a dead job the move
// FAILED → DEAD: both reach JobTransition, and JobFinished reports DEAD too.
//
// A Metrics may also have any of these methods, which the Queue then calls:
//
//	// LeaseLost counts a job whose worker's lease ran out before the job
//	// left its pipeline state (the worker died, paused or lost the store):
//	// the worker that rescues the job counts it, once per lost lease.
//	LeaseLost(jobType lifecycle.JobType)
//	// RecordQuarantined counts a poison record the Queue quarantined, by
//	// kind ("job", "agent_lock", "sweep_lease", "other").
//	RecordQuarantined(kind string)
//	// HandlerAbandoned counts a handler call abandoned at StepTimeout while
//	// its goroutine ran on (also logged as unit_abandoned).
//	HandlerAbandoned(jobType lifecycle.JobType, step lifecycle.JobState)
type Metrics interface {
	// JobTransition counts one move of a job, from → to (from is "" for
	// the creation), with how long the job had been in from: the time
	// since the job's previous write that moved it, and 0 for the creation
	// and for a move after the first in one write (RETRY_BACKOFF → QUEUED
	// → CONTEXT_ASSEMBLY is one write). So the pipeline states' times are
	// the step times of docs/spec.md#metrics.
	JobTransition(jobType lifecycle.JobType, from, to lifecycle.JobState, inFrom time.Duration)
	// JobFinished observes a job that reached COMPLETE, DEAD or CANCELLED, with its
	// time since it was created (end-to-end, retries included). FAILED is
	// not an end: the queue buries a FAILED job at once.
	JobFinished(jobType lifecycle.JobType, outcome lifecycle.JobState, d time.Duration)
	// AttemptFailed counts an attempt that failed in step (a pipeline
	// state), sending the job to RETRY_BACKOFF with error_code code
	// (TIMEOUT, LEASE_EXPIRED, ARTIFACT_WRITE_ERROR, ...; see Job.ErrorCode).
	// Whether it is retried depends on the attempts left.
	AttemptFailed(jobType lifecycle.JobType, step lifecycle.JobState, code string)
}

// The optional methods of Metrics.
type (
	leaseMetrics interface {
		LeaseLost(jobType lifecycle.JobType)
	}
	quarantineMetrics interface{ RecordQuarantined(kind string) }
	abandonMetrics    interface {
		HandlerAbandoned(jobType lifecycle.JobType, step lifecycle.JobState)
	}
)

type noMetrics struct{}

func (noMetrics) JobTransition(lifecycle.JobType, lifecycle.JobState, lifecycle.JobState, time.Duration) {
}
func (noMetrics) JobFinished(lifecycle.JobType, lifecycle.JobState, time.Duration) {}
func (noMetrics) AttemptFailed(lifecycle.JobType, lifecycle.JobState, string)      {}

// observer reports what the queue's writes did: to Config.Metrics, and to
// the Wait calls of the job written.
type observer struct {
	metrics Metrics
	waits   *waitSet
}

// observe reports the moves of a write that succeeded: after is the
// document written, prior the one it replaced (nil for a creation), moves
// the moves the write made (the end of after's trail).
func (o *observer) observe(prior, after *jobDoc, moves []lifecycle.JobMove) {
	o.waits.changed(after.JobID)
	if len(moves) == 0 {
		return
	}
	m := o.metrics
	for i, mv := range moves {
		var in time.Duration
		if i == 0 && prior != nil && mv.From != "" {
			in = max(after.UpdatedAt.Sub(prior.UpdatedAt), 0)
		}
		m.JobTransition(after.JobType, mv.From, mv.To, in)
		switch {
		case mv.To == lifecycle.JobRetryBackoff:
			code := after.ErrorCode
			m.AttemptFailed(after.JobType, mv.From, code)
			if code == codes.JobLeaseExpired {
				if lm, ok := m.(leaseMetrics); ok {
					lm.LeaseLost(after.JobType)
				}
			}
		case mv.To == lifecycle.JobComplete || mv.To == lifecycle.JobDead || mv.To == lifecycle.JobCancelled:
			m.JobFinished(after.JobType, mv.To, max(after.UpdatedAt.Sub(after.CreatedAt), 0))
		}
	}
}

// quarantined counts a record moved to quarantine from key.
func (o *observer) quarantined(key string) {
	m, ok := o.metrics.(quarantineMetrics)
	if !ok {
		return
	}
	kind := "other"
	switch {
	case strings.HasPrefix(key, layout.JobsPrefix):
		kind = "job"
	case strings.HasPrefix(key, agentPrefix):
		kind = "agent_lock"
	case key == layout.SweepLeaseKey:
		kind = "sweep_lease"
	}
	m.RecordQuarantined(kind)
}

// abandoned counts a handler call left behind at StepTimeout.
func (o *observer) abandoned(jobType lifecycle.JobType, step lifecycle.JobState) {
	if m, ok := o.metrics.(abandonMetrics); ok {
		m.HandlerAbandoned(jobType, step)
	}
}

// AgentDepth is one agent's ready lane as Depths read it.
type AgentDepth struct {
	Agent string
	// Ready counts the entries due now: jobs QUEUED, or in RETRY_BACKOFF
	// with their wait over, that no worker has picked up yet.
	Ready int
	// Waiting counts the entries not due yet: jobs in RETRY_BACKOFF still
	// waiting, and jobs QUEUED to run later (NewJob.RunAt, Delay).
	Waiting int
	// Age is how long the oldest due entry has waited for a worker since
	// it became ready (enqueued, its run time, or its backoff over), by the Queue's
	// clock; 0 when Ready is 0 (alert: QUEUED > 5 min, docs/spec.md#metrics).
	Age time.Duration
}
