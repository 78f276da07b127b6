package schedule

import (
	"context"

	"github.com/runconveyor/conveyor/lifecycle"
)

// View is the Scheduler as callers outside the SDK see it: the schedules
// as lifecycle.ScheduleInfo, the one type the server writes and the Go
// client reads. Nil for a nil Scheduler.
func (s *Scheduler) View() lifecycle.Schedules {
	if s == nil {
		return nil
	}
	return view{s}
}

type view struct{ s *Scheduler }

func (v view) List(ctx context.Context) ([]lifecycle.ScheduleInfo, error) {
	infos, err := v.s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]lifecycle.ScheduleInfo, len(infos))
	for i, in := range infos {
		out[i] = in.public()
	}
	return out, nil
}

func (v view) Pause(ctx context.Context, id, by string) (lifecycle.ScheduleInfo, error) {
	in, err := v.s.Pause(ctx, id, by)
	return in.public(), err
}

func (v view) Resume(ctx context.Context, id string) (lifecycle.ScheduleInfo, error) {
	in, err := v.s.Resume(ctx, id)
	return in.public(), err
}

// public is the Info field for field (a test holds their JSON equal).
func (i Info) public() lifecycle.ScheduleInfo {
	return lifecycle.ScheduleInfo{
		ID: i.ID, Agent: i.Agent, Cron: i.Cron, Every: i.Every, TimeZone: i.TimeZone,
		Jitter: i.Jitter, Missed: i.Missed, CatchUp: i.CatchUp, Input: i.Input,
		Next: i.Next, LastSlot: i.LastSlot, LastFired: i.LastFired, LastRunID: i.LastRunID,
		Paused: i.Paused, PausedBy: i.PausedBy,
	}
}
