package harness

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// Before each measurement the harness waits for a quiet machine. Rounds
// rotate the systems' order, but with three rounds and five systems one
// system still mostly follows the same neighbour: in one run the SDK on
// SQLite followed asynq in two rounds of three and ran 25% slower at 30%
// more CPU a job than in the round it went first, while River followed
// River-as-shipped (a light run) in every round. What a measurement leaves
// behind (dirty pages, a Postgres checkpoint or autovacuum, Redis's
// background work) is finished or waited out before the next one starts.

// Quieter is a driver whose server can be asked to finish its background
// work before a measurement (Postgres: a checkpoint).
type Quieter interface {
	Quiet(ctx context.Context) error
}

// SettleConfig bounds the wait for a quiet machine.
type SettleConfig struct {
	// Busy is the share of the machine's CPU time (every core, iowait
	// included) above which a window is not quiet. Default 0.05.
	Busy float64
	// Window is one sample's length; two quiet windows in a row end the
	// wait. Default 250ms.
	Window time.Duration
	// Max bounds the wait; a machine still busy then is measured anyway,
	// and Settled says so. Default 20s.
	Max time.Duration
	// Also are the other systems of the run: their servers are quieted
	// too (Quieter), since a Postgres checkpoint started by the clock
	// during another system's measurement writes River's pages then.
	Also []Driver
}

// Settled is what one wait for a quiet machine found.
type Settled struct {
	Waited time.Duration
	Busy   float64 // the last window's busy share
	Quiet  bool    // false: Max passed first
}

// Settle asks d's server and cfg.Also's to finish their background work
// (Quieter; each system once, by name), flushes
// the kernel's dirty pages (sync(2)), then waits until the machine's CPU
// has been quiet for two windows in a row, or cfg.Max passed.
func Settle(ctx context.Context, d Driver, cfg SettleConfig) (Settled, error) {
	if cfg.Busy <= 0 {
		cfg.Busy = 0.05
	}
	if cfg.Window <= 0 {
		cfg.Window = 250 * time.Millisecond
	}
	if cfg.Max <= 0 {
		cfg.Max = 20 * time.Second
	}
	start := time.Now()
	asked := map[string]bool{}
	for _, d := range append([]Driver{d}, cfg.Also...) {
		if asked[d.Name()] {
			continue // d is among the run's systems too
		}
		asked[d.Name()] = true
		if q, ok := d.(Quieter); ok {
			if err := q.Quiet(ctx); err != nil {
				return Settled{}, fmt.Errorf("%s: quiet: %w", d.Name(), err)
			}
		}
	}
	syscall.Sync()
	quiet := 0
	var s Settled
	for quiet < 2 {
		a, err := readMachineCPU()
		if err != nil {
			return Settled{}, err
		}
		select {
		case <-ctx.Done():
			return Settled{}, ctx.Err()
		case <-time.After(cfg.Window):
		}
		b, err := readMachineCPU()
		if err != nil {
			return Settled{}, err
		}
		s.Busy = b.busyShare(a)
		if s.Busy < cfg.Busy {
			quiet++
		} else {
			quiet = 0
		}
		if s.Waited = time.Since(start); quiet < 2 && s.Waited > cfg.Max {
			return s, nil
		}
	}
	s.Quiet = true
	return s, nil
}

// machineCPU is the machine's CPU time, all cores, from /proc/stat (read
// by procfs), in seconds.
type machineCPU struct {
	total, idle float64 // idle: idle only (iowait counts as busy: the disk is)
}

func readMachineCPU() (machineCPU, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return machineCPU{}, err
	}
	return machineCPUOf(fs)
}

// machineCPUOf reads the machine's CPU time from fs's stat: user, nice,
// system, idle, iowait, irq, softirq and steal (guest time is already in
// user and nice).
func machineCPUOf(fs procfs.FS) (machineCPU, error) {
	st, err := fs.Stat()
	if err != nil {
		return machineCPU{}, err
	}
	c := st.CPUTotal
	m := machineCPU{total: c.User + c.Nice + c.System + c.Idle + c.Iowait + c.IRQ + c.SoftIRQ + c.Steal, idle: c.Idle}
	if m.total <= 0 {
		return machineCPU{}, errors.New("/proc/stat: no cpu line")
	}
	return m, nil
}

// busyShare is the share of the time between a and m that was not idle.
func (m machineCPU) busyShare(a machineCPU) float64 {
	total := m.total - a.total
	if total <= 0 {
		return 0
	}
	return (total - (m.idle - a.idle)) / total
}

// settle is Settle for a measurement that asked for it (cfg not nil),
// noted in res.
func settle(ctx context.Context, d Driver, cfg *SettleConfig, res *Result) error {
	if cfg == nil {
		return nil
	}
	s, err := Settle(ctx, d, *cfg)
	if err != nil {
		return err
	}
	res.Settled = &s
	return nil
}
