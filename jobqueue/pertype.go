package jobqueue

import (
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

// A user job type's own attempts, timeout and backoff (TypeConfig), each
// falling back to the Queue's (Config).

// maxAttemptsOf is max_attempts for a job of type t inserted without one:
// the type's TypeConfig.MaxAttempts, else Config.MaxAttempts.
func (q *admission) maxAttemptsOf(t lifecycle.JobType) int {
	if m, ok := q.typeMax[t]; ok {
		return m
	}
	return q.maxAttempts
}

// timeoutOf bounds a handler call of a job of type t: the type's
// TypeConfig.Timeout, else Config.StepTimeout.
func (q *runner) timeoutOf(t lifecycle.JobType) time.Duration {
	if tc, ok := q.types[t]; ok && tc.Timeout > 0 {
		return tc.Timeout
	}
	return q.stepTimeout
}

// waitFor is the wait in RETRY_BACKOFF after job's failed attempt: its
// type's BackoffFunc or Backoff, else Config.Backoff.
func (q *retries) waitFor(job *lifecycle.Job) time.Duration {
	list := q.backoff
	if tc, ok := q.types[job.JobType]; ok {
		if tc.BackoffFunc != nil {
			return min(max(0, tc.BackoffFunc(*job)), maxDelay) // as a delay: short of the lane key's last time
		}
		if len(tc.Backoff) > 0 {
			list = tc.Backoff
		}
	}
	return nth(list, job.Attempt)
}

// nth is the wait after failed attempt n (1-based) of list: list[n-1],
// the last entry repeating.
func nth(list []time.Duration, attempt int) time.Duration {
	i := min(max(attempt-1, 0), len(list)-1)
	return list[i]
}
