package records

import (
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

// HeldBy tells whether l is the lease of owner at epoch (whatever its expiry).
func HeldBy(l *lifecycle.Lease, owner string, epoch int64) bool {
	return l != nil && l.Owner == owner && l.Epoch == epoch
}

// LeaseLive tells whether l is held and unexpired at now.
func LeaseLive(l *lifecycle.Lease, now time.Time) bool {
	return l != nil && l.Owner != "" && now.Before(l.ExpiresAt)
}
