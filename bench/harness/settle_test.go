package harness

import (
	"context"
	"testing"
	"time"
)

func TestParseMachineCPU(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, line  string
		total, idle int64
		bad         bool
	}{
		{name: "linux 6", line: "cpu  8801162 38241 2606816 4422487 75724 0 175603 3010 0 0", total: 8801162 + 38241 + 2606816 + 4422487 + 75724 + 175603 + 3010, idle: 4422487},
		{name: "guest time not counted twice", line: "cpu  10 0 10 70 10 0 0 0 5 5", total: 100, idle: 70},
		{name: "old kernel, four fields", line: "cpu  1 2 3 4", total: 10, idle: 4},
		{name: "not the cpu line", line: "intr 1 2 3 4 5", bad: true},
		{name: "too short", line: "cpu 1 2", bad: true},
		{name: "not a number", line: "cpu 1 2 x 4 5", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := parseMachineCPU(tc.line)
			if tc.bad {
				if err == nil {
					t.Fatalf("parsed %q: %+v", tc.line, m)
				}
				return
			}
			if err != nil || m.total != tc.total || m.idle != tc.idle {
				t.Fatalf("parseMachineCPU(%q) = %+v, %v; want total %d idle %d", tc.line, m, err, tc.total, tc.idle)
			}
		})
	}
}

func TestBusyShare(t *testing.T) {
	t.Parallel()
	a := machineCPU{total: 1000, idle: 800}
	for _, tc := range []struct {
		b    machineCPU
		want float64
	}{
		{machineCPU{total: 1100, idle: 900}, 0},    // all idle
		{machineCPU{total: 1100, idle: 800}, 1},    // all busy
		{machineCPU{total: 1100, idle: 875}, 0.25}, // a quarter busy
		{a, 0}, // no time passed
	} {
		if got := tc.b.busyShare(a); got != tc.want {
			t.Errorf("busyShare(%+v → %+v) = %v, want %v", a, tc.b, got, tc.want)
		}
	}
}

// TestSettleWaitsOutABusyMachine keeps one core busy, then idle: Settle
// must not return while the spinner runs (a quarter-second window on two
// cores is then at least ~40% busy).
func TestSettleWaitsOutABusyMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("spins a core for a second")
	}
	stop := make(chan struct{})
	spun := make(chan struct{})
	go func() {
		defer close(spun)
		for {
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	spin := time.Second
	go func() { time.Sleep(spin); close(stop) }()
	start := time.Now()
	s, err := Settle(context.Background(), noDriver{}, SettleConfig{Busy: 0.2, Max: 15 * time.Second})
	<-spun
	if err != nil {
		t.Fatal(err)
	}
	// Quiet or not (a loaded machine may stay busy past Max), it must not
	// have returned while the spinner ran.
	if took := time.Since(start); took < spin {
		t.Fatalf("Settle returned after %s (quiet %v, %.0f%% busy), while one core was still spinning (until %s)", took, s.Quiet, 100*s.Busy, spin)
	}
}

// noDriver is a Driver with nothing to quiet.
type noDriver struct{ Driver }

func (noDriver) Name() string { return "none" }
