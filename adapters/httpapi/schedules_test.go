package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestSchedules: anyone lists the schedules; only an admin pauses and
// resumes one, and is recorded as who paused it.
func TestSchedules(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	infos, err := g.client(lifecycle.ActorFrontend).Schedules(ctx)
	if err != nil || len(infos) != 2 || infos[1].ID != "nightly" || infos[1].Paused || !infos[1].Next.After(infos[1].LastSlot) {
		t.Fatalf("Schedules = %+v, %v", infos, err)
	}
	// A periodic job's schedule shows its job as its target, and no agent.
	code, _, body := g.raw("GET", "/schedules", "tok-frontend", "", nil, nil)
	want := `{"id":"hourly-brief","missed":"catch_up","catch_up":12,"job":{"job_type":"BRIEF","agent_slug":"briefs","max_attempts":2},"every":"1h0m0s","next":`
	if code != http.StatusOK || !strings.Contains(string(body), want) {
		t.Fatalf("GET /schedules: %d %s\nwant it to hold %s", code, body, want)
	}
	before := g.snapshot()
	_, err = g.client(lifecycle.ActorGateway).PauseSchedule(ctx, "nightly", true)
	apiError(t, err, http.StatusForbidden, codes.Forbidden)
	_, err = g.client(lifecycle.ActorAdmin).PauseSchedule(ctx, "nope", true)
	apiError(t, err, http.StatusNotFound, codes.NotFound)
	_, err = g.client(lifecycle.ActorAdmin).PauseSchedule(ctx, "../x", true)
	apiError(t, err, http.StatusBadRequest, codes.InvalidInput)
	if after := g.snapshot(); len(after) != len(before) {
		t.Fatalf("a refused pause wrote: %d keys before, %d after", len(before), len(after))
	}
	info, err := g.client(lifecycle.ActorAdmin).PauseSchedule(ctx, "nightly", true)
	if err != nil || !info.Paused || info.PausedBy != "admin" {
		t.Fatalf("Pause = %+v, %v", info, err)
	}
	info, err = g.client(lifecycle.ActorAdmin).PauseSchedule(ctx, "nightly", false)
	if err != nil || info.Paused {
		t.Fatalf("Resume = %+v, %v", info, err)
	}
}
