package conveyortest

import "time"

// SetStall shortens the driver's real-time patience for a test of the
// helper's own failure; it returns the function that restores it.
func SetStall(d time.Duration) (restore func()) {
	old := stall
	stall = d
	return func() { stall = old }
}
