package run

import (
	"context"

	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/lifecycle"
)

// What the tests read of a Runner that is no call of its public surface.

// MaxIdempotencyKeyBytes is the limit of an idempotency key.
const MaxIdempotencyKeyBytes = maxIdempotencyKeyBytes

// Stragglers reports the goroutines of step attempts this runner abandoned
// at a deadline: how many still run, and how many there were in all.
func (r *Runner) Stragglers() (live int, total int64) { return r.units.Stragglers() }

// Quarantined counts the poison records this runner moved to quarantine.
func (r *Runner) Quarantined() int64 { return r.poison.count() }

// RunningByHeartbeat is the orphan query (reads.runningByHeartbeat).
func (r *Runner) RunningByHeartbeat(ctx context.Context, limit int) ([]lifecycle.RunStatus, error) {
	return r.reads.runningByHeartbeat(ctx, limit)
}

// Idempotency reads the record of a key, its key checked first.
func (r *Runner) Idempotency(ctx context.Context, key string) (idemrecord.Record, error) {
	return r.idem.read(ctx, key)
}
