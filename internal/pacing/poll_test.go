package pacing

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPollSchedule(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name  string
		idle  time.Duration
		found []bool
		want  []time.Duration
	}{
		{"backs off to Idle", 300 * ms, []bool{false, false, false, false, false, false},
			[]time.Duration{25 * ms, 50 * ms, 100 * ms, 200 * ms, 300 * ms, 300 * ms}},
		{"work resets, and the waits stay short BusyLooks looks", time.Second,
			append([]bool{false, false, true}, make([]bool, BusyLooks+2)...),
			append(append([]time.Duration{25 * ms, 50 * ms, 25 * ms}, repeat(25*ms, BusyLooks)...), 50*ms, 100*ms)},
		{"Idle below BusyPoll", 10 * ms, []bool{true, false},
			[]time.Duration{10 * ms, 10 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := Poll{Idle: tt.idle}
			for i, f := range tt.found {
				if got := p.Next(f); got != tt.want[i] {
					t.Fatalf("look %d (found %v): wait %v, want %v", i, f, got, tt.want[i])
				}
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestPollBusy(t *testing.T) {
	t.Parallel()
	p := Poll{Idle: time.Second}
	for range 10 {
		p.Next(false)
	}
	p.Busy()
	for i := range BusyLooks {
		if got := p.Next(false); got != BusyPoll {
			t.Fatalf("look %d after Busy: wait %v, want %v", i, got, BusyPoll)
		}
	}
	if got := p.Next(false); got != 2*BusyPoll {
		t.Fatalf("after Busy and %d empty looks: wait %v, want %v", BusyLooks, got, 2*BusyPoll)
	}
}
