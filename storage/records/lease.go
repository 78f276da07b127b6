package records

import (
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/lifecycle/codes"
)

// ErrLeaseLost is matched by every error an owner gets once it no longer
// holds the lease it wrote under: another process took the record over
// (a higher epoch) or the lease lapsed. It is the one such sentinel of the
// whole SDK; runs, jobs and NLM jobs all report it. A writer that gets it
// must stop: none of its later writes land.
var ErrLeaseLost = codes.ErrLeaseLost

// Lease says which process owns a record (a run, a job) and until when
// (docs/spec.md#recovery). The owner renews it by heartbeat; another process takes the
// record over only after ExpiresAt, with Epoch+1, and every write of an owner
// is conditional on its own (Owner, Epoch) still being in the record, so a
// process that was paused past its lease can write nothing once it wakes.
type Lease struct {
	Owner     string    `json:"owner"`
	Epoch     int64     `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"`
}

// HeldBy tells whether l is the lease of owner at epoch (whatever its expiry).
func (l *Lease) HeldBy(owner string, epoch int64) bool {
	return l != nil && l.Owner == owner && l.Epoch == epoch
}

// Live tells whether l is held and unexpired at now.
func (l *Lease) Live(now time.Time) bool {
	return l != nil && l.Owner != "" && now.Before(l.ExpiresAt)
}

// LeaseLostError says which record a writer lost and who holds it now.
type LeaseLostError struct {
	// Key is the record's key.
	Key string
	// Owner and Epoch are the lease the writer held.
	Owner string
	Epoch int64
	// Holder and HolderEpoch are the lease found in the record (empty when
	// none); Expired is set when the writer's own lease was found lapsed.
	Holder      string
	HolderEpoch int64
	Expired     bool
}

// Error names the record, the lost epoch and the lease now in the record.
func (e *LeaseLostError) Error() string {
	if e.Expired {
		return fmt.Sprintf("conveyor: %s: lease of %q at epoch %d lapsed", e.Key, e.Owner, e.Epoch)
	}
	return fmt.Sprintf("conveyor: %s: lease of %q at epoch %d lost (now held by %q at epoch %d)",
		e.Key, e.Owner, e.Epoch, e.Holder, e.HolderEpoch)
}

// Is matches ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// Code is RUN_LEASE_LOST, the code of the SDK's code table.
func (e *LeaseLostError) Code() string { return codes.LeaseLost }
