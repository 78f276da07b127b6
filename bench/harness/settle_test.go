package harness

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// TestMachineCPU reads /proc/stat files through procfs: the CPU time and
// idle of the "cpu" line (guest time not counted twice), in seconds of
// USER_HZ ticks, and an error for a file without the line or with garbage.
func TestMachineCPU(t *testing.T) {
	t.Parallel()
	const hz = 100 // procfs reads /proc/stat in USER_HZ, 100 on Linux
	for _, tc := range []struct {
		name, stat  string
		total, idle float64
		bad         bool
	}{
		{name: "linux 6", stat: "cpu  8801162 38241 2606816 4422487 75724 0 175603 3010 0 0\ncpu0 1 1 1 1 1 0 0 0 0 0\nbtime 1\n",
			total: float64(8801162+38241+2606816+4422487+75724+175603+3010) / hz, idle: 4422487.0 / hz},
		{name: "guest time not counted twice", stat: "cpu  10 0 10 70 10 0 0 0 5 5\n", total: 1, idle: 0.7},
		{name: "old kernel, four fields", stat: "cpu  1 2 3 4\n", total: 0.1, idle: 0.04},
		{name: "no cpu line", stat: "intr 1 2 3 4 5\n", bad: true},
		{name: "not a number", stat: "cpu 1 2 x 4 5\n", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(tc.stat), 0o644); err != nil {
				t.Fatal(err)
			}
			fs, err := procfs.NewFS(dir)
			if err != nil {
				t.Fatal(err)
			}
			m, err := machineCPUOf(fs)
			if tc.bad {
				if err == nil {
					t.Fatalf("read %q: %+v", tc.stat, m)
				}
				return
			}
			if err != nil || math.Abs(m.total-tc.total) > 1e-6 || math.Abs(m.idle-tc.idle) > 1e-6 {
				t.Fatalf("machineCPUOf(%q) = %+v, %v; want total %v idle %v", tc.stat, m, err, tc.total, tc.idle)
			}
		})
	}
	if _, err := readMachineCPU(); err != nil {
		t.Fatalf("this machine's /proc/stat: %v", err)
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
