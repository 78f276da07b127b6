package conveyor_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestScheduleJSON: a Schedule is written with Go duration strings, the
// form a config file holds, and read from them or from nanoseconds.
func TestScheduleJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     lifecycle.Schedule
	}{
		{"durations", `{"id":"tick","agent":"demo","every":"20s","jitter":"1.5s","missed":"latest"}`,
			lifecycle.Schedule{ID: "tick", Agent: "demo", Every: 20 * time.Second, Jitter: 1500 * time.Millisecond, Missed: "latest"}},
		{"nanoseconds", `{"id":"tick","agent":"demo","every":20000000000}`,
			lifecycle.Schedule{ID: "tick", Agent: "demo", Every: 20 * time.Second}},
		{"cron", `{"id":"daily","agent":"demo","cron":"@daily","time_zone":"Europe/Kyiv","catch_up":3}`,
			lifecycle.Schedule{ID: "daily", Agent: "demo", Cron: "@daily", TimeZone: "Europe/Kyiv", CatchUp: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got lifecycle.Schedule
			if err := json.Unmarshal([]byte(tt.in), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("read (-want +got):\n%s", diff)
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			var back map[string]any
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if got.Every != 0 && back["every"] != got.Every.String() {
				t.Fatalf("%s: every %v, want %q", b, back["every"], got.Every.String())
			}
			var again lifecycle.Schedule
			if err := json.Unmarshal(b, &again); err != nil || !cmp.Equal(again, got) {
				t.Fatalf("round trip of %s: %+v, %v", b, again, err)
			}
		})
	}
	var bad lifecycle.Schedule
	if err := json.Unmarshal([]byte(`{"id":"x","every":"soon"}`), &bad); err == nil {
		t.Fatal("every \"soon\" read without an error")
	}
}
