package client_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestScheduleReadsWhatTheServerWrites: the Schedule the client returns (lifecycle.ScheduleInfo) decodes the
// JSON of the Scheduler's schedule.Info field for field, and writes it
// back byte for byte (the CLI prints it).
func TestScheduleReadsWhatTheServerWrites(t *testing.T) {
	t.Parallel()
	fired := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		info schedule.Info
	}{
		{"cron, never fired", schedule.Info{
			Schedule:         schedule.Schedule{ID: "nightly", Agent: "archivist", Cron: "0 2 * * *", TimeZone: "Europe/Paris"},
			ScheduleProgress: schedule.Progress{Next: fired.Add(time.Hour)}}},
		{"every, paused, fired", schedule.Info{
			Schedule: schedule.Schedule{ID: "tick", Agent: "a", Every: 90 * time.Second, Jitter: 2 * time.Second,
				Missed: schedule.MissedLatest, CatchUp: 3, Input: json.RawMessage(`{"k":1}`)},
			ScheduleProgress: schedule.Progress{Next: fired.Add(90 * time.Second), LastSlot: fired, LastFired: &fired,
				LastRunID: "run-1", Paused: true, PausedBy: "admin"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want, err := json.Marshal(tt.info)
			if err != nil {
				t.Fatal(err)
			}
			var s lifecycle.ScheduleInfo
			if err := json.Unmarshal(want, &s); err != nil {
				t.Fatal(err)
			}
			if s.ID != tt.info.ID || s.Every != tt.info.Every || s.Jitter != tt.info.Jitter || s.Missed != string(tt.info.Missed) ||
				!s.Next.Equal(tt.info.Next) || s.LastRunID != tt.info.LastRunID || s.Paused != tt.info.Paused || s.PausedBy != tt.info.PausedBy {
				t.Errorf("decoded %+v from %s", s, want)
			}
			got, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("written back:\n got %s\nwant %s", got, want)
			}
		})
	}
}
