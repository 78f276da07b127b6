package authority

import (
	"strings"

	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
)

// GuestPrefix starts the actor of a zone guest: "guest:{zone}"
// (docs/spec.md#actors), which is also the identity its inbox entries
// carry. A guest has no row in any table: it may only submit to the inbox,
// which the gateway writes for it.
const GuestPrefix = "guest:"

// ZoneGuest is the actor of a guest of zone.
func ZoneGuest(zone string) lifecycle.Actor { return lifecycle.Actor(GuestPrefix + zone) }

// GuestZone returns the zone of a zone guest's actor, or false for any
// other actor (a zone must be a valid id).
func GuestZone(a lifecycle.Actor) (string, bool) {
	zone, ok := strings.CutPrefix(string(a), GuestPrefix)
	return zone, ok && storekey.ValidateID("zone", zone) == nil
}
