package schedule

import "github.com/runconveyor/conveyor/lifecycle"

// View is the Scheduler as callers outside the SDK hold it: nil for a nil
// Scheduler (an interface holding a nil pointer would not be nil).
func (s *Scheduler) View() lifecycle.Schedules {
	if s == nil {
		return nil
	}
	return s
}
