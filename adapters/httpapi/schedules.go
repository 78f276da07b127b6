package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// scheduleRoutes serves /schedules over the Scheduler, nil when none is
// served.
type scheduleRoutes struct {
	sched lifecycle.Schedules
}

func (h *scheduleRoutes) table() []route {
	return []route{
		{method: "GET", path: "/schedules", operator: true, h: h.listSchedules()},
		{method: "POST", path: "/schedules/{scheduleId}/pause", operator: true, actors: admin, h: h.pauseSchedule(true)},
		{method: "POST", path: "/schedules/{scheduleId}/resume", operator: true, actors: admin, h: h.pauseSchedule(false)},
	}
}

func (h *scheduleRoutes) listSchedules() handlerFunc {
	return needs(h.sched != nil, "scheduler", jsonRoute(http.StatusOK, noInput,
		func(ctx context.Context, _ lifecycle.Actor, _ struct{}) ([]lifecycle.ScheduleInfo, error) {
			return h.sched.List(ctx)
		}))
}

// pauseSchedule pauses or resumes a schedule, in every process sharing the
// store; the actor is recorded as who paused it.
func (h *scheduleRoutes) pauseSchedule(pause bool) handlerFunc {
	return needs(h.sched != nil, "scheduler", jsonRoute(http.StatusOK, pathNoBody("scheduleId", "schedule_id", "pause and resume take no body"),
		func(ctx context.Context, actor lifecycle.Actor, id string) (lifecycle.ScheduleInfo, error) {
			var info lifecycle.ScheduleInfo
			var err error
			if pause {
				info, err = h.sched.Pause(ctx, id, string(actor))
			} else {
				info, err = h.sched.Resume(ctx, id)
			}
			if errors.Is(err, lifecycle.ErrNotFound) {
				return info, apiErr(codes.NotFound, "no schedule %q", id)
			}
			return info, err
		}))
}
