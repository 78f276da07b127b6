package jobqueue

import (
	"context"
	"iter"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// What the tests reach of the package's unexported names.

// Defaults of Config.
const (
	DefaultMaxAttempts = defaultMaxAttempts
	DefaultLeaseTTL    = defaultLeaseTTL
	DefaultStepTimeout = defaultStepTimeout
	DefaultStopGrace   = defaultStopGrace
	DefaultSweepBatch  = defaultSweepBatch
)

// DefaultBackoff is Config.Backoff's default.
var DefaultBackoff = defaultBackoff

// The actors of the system's calls.
const (
	SystemActor   = systemActor
	OperatorActor = operatorActor
)

// TypeLanePrefix starts the lane of a job enqueued without an agent.
const TypeLanePrefix = typeLanePrefix

// TypeLane is the lane of the jobs of a type enqueued without an agent,
// in the default queue.
func TypeLane(t lifecycle.JobType) string { return typeLane(t, "") }

// QueueLane is the lane of the jobs of a type in a named queue.
var QueueLane = typeLane

// PayloadError is a Typed handler's failure to decode its job's payload.
type PayloadError = payloadError

// WaitError is Wait's answer when its ctx ended first.
type WaitError = waitError

// Stragglers reports how many handler calls abandoned at StepTimeout (or at
// shutdown) are still running, and how many were abandoned in all.
func (q *Queue) Stragglers() (live int, total int64) { return q.units.Stragglers() }

// Quarantined counts the records this Queue moved to quarantine.
func (q *Queue) Quarantined() int64 { return q.quar.count() }

// ReleaseKeptForTest releases the agent locks the Queue's claims kept, as
// a Worker does when it stops.
func (q *Queue) ReleaseKeptForTest(ctx context.Context) { q.locks.releaseKept(ctx) }

// StoreForTest is the Queue's store.
func (q *Queue) StoreForTest() *storage.Store { return q.admit.store }

// JobEventsForTest yields the job events of jobID's audit log of the
// Queue clock's day, in order.
func (q *Queue) JobEventsForTest(ctx context.Context, jobID string) iter.Seq2[lifecycle.AuditEvent, error] {
	return func(yield func(lifecycle.AuditEvent, error) bool) {
		for e, err := range records.ReadAuditDay(ctx, q.admit.store, q.clock.Now()) {
			if err != nil || e.JobID == jobID && strings.HasPrefix(e.Event, "job.") {
				if !yield(e, err) || err != nil {
					return
				}
			}
		}
	}
}

// CallbacksPrefix holds the callback outbox.
const CallbacksPrefix = callbacksPrefix

// SendCallbacks makes one pass of the callback sender as owner, as a
// Worker's does, and returns when the next entry is due (zero: none).
func SendCallbacks(ctx context.Context, q *Queue, owner string) time.Time {
	return q.callbacks.pass(ctx, owner, callbackPeriod)
}
