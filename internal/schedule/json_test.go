package schedule_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestDurationsAreGoDurationStrings: GET /schedules says "every": "20s"
// for a schedule configured as 20s, not a count of nanoseconds.
func TestDurationsAreGoDurationStrings(t *testing.T) {
	t.Parallel()
	next := time.Date(2026, 11, 25, 12, 0, 20, 0, time.UTC)
	info := schedule.Info{
		Schedule:         schedule.Schedule{ID: "tick", Agent: "demo", Every: 20 * time.Second, Jitter: 1500 * time.Millisecond},
		ScheduleProgress: schedule.Progress{Next: next, LastRunID: "run_x", Paused: true, PausedBy: "ops"},
	}
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"every":"20s"`, `"jitter":"1.5s"`, `"id":"tick"`, `"next":"2026-11-25T12:00:20Z"`, `"paused_by":"ops"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var back schedule.Info
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(info, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestScheduleDurationsFromJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		every time.Duration
		bad   bool
	}{
		{in: `{"id":"a","agent":"b","every":"90s"}`, every: 90 * time.Second},
		{in: `{"id":"a","agent":"b","every":20000000000}`, every: 20 * time.Second},
		{in: `{"id":"a","agent":"b","cron":"@hourly"}`},
		{in: `{"id":"a","agent":"b","every":"soon"}`, bad: true},
		{in: `{"id":"a","agent":"b","every":true}`, bad: true},
		{in: `{"id":"a","every":"1m","job":{"job_type":"DIGEST","payload":{"to":"ops"},"max_attempts":3}}`, every: time.Minute},
	}
	for _, tt := range tests {
		var s schedule.Schedule
		err := json.Unmarshal([]byte(tt.in), &s)
		var ie *lifecycle.InputError
		if tt.bad != (err != nil) || (tt.bad && !errors.As(err, &ie)) {
			t.Errorf("%s: err %v, want an InputError: %v", tt.in, err, tt.bad)
			continue
		}
		if !tt.bad && (s.Every != tt.every || s.ID != "a" || (s.Agent != "b") == (s.Job == nil || s.Job.JobType != "DIGEST" || s.Job.MaxAttempts != 3)) {
			t.Errorf("%s: got %+v", tt.in, s)
		}
	}
}
