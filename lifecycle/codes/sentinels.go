package codes

import "errors"

// The sentinels of the categories some codes stand for, defined at this leaf
// so that every surface, the Go client included, matches them without
// importing the store or the engines. The packages that own them name them
// too (storage.ErrUnavailable, records.ErrCorrupt, records.ErrLeaseLost,
// authority.ErrForbidden): the same values.
var (
	// ErrUnavailable: UPSTREAM_UNAVAILABLE (storage.ErrUnavailable).
	ErrUnavailable = errors.New("storage: store unavailable")
	// ErrCorrupt: RECORD_QUARANTINED (records.ErrCorrupt).
	ErrCorrupt = errors.New("storage: corrupt record")
	// ErrLeaseLost: LEASE_LOST (records.ErrLeaseLost).
	ErrLeaseLost = errors.New("conveyor: lease lost")
	// ErrForbidden: FORBIDDEN from the authority matrix (authority.ErrForbidden).
	ErrForbidden = errors.New("authority: forbidden")
)
