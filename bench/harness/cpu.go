package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU per job (issue 22) is this process's CPU over a measurement's window
// plus the CPU of the system's server over the same window. Every driver
// runs in this one process, but a round measures one system at a time, so
// the process's delta is that system's client and workers plus the
// harness's enqueuers, the same for every system.

// processCPU is this process's user+system CPU time so far, every thread
// (getrusage(RUSAGE_SELF), microseconds).
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// clockTick is the unit of /proc/<pid>/stat's times: USER_HZ, which Linux
// fixes at 100 for user space whatever the kernel's own HZ
// (sysconf(_SC_CLK_TCK)); Go's syscall package has no sysconf.
const clockTick = 10 * time.Millisecond

// procStat is what procTreeCPU needs of one /proc/<pid>/stat.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime int64 // clock ticks
	threads                      int
}

// readProcStat parses /proc/<pid>/stat. The command name, in parentheses,
// may hold spaces and parentheses itself, so fields are counted from the
// last ')'.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	// f[0] is field 3 of proc(5) (state): field n is f[n-3].
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 18 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var s procStat
	var perr error
	num := func(k int) int64 {
		v, err := strconv.ParseInt(f[k-3], 10, 64)
		if err != nil && perr == nil {
			perr = fmt.Errorf("/proc/%d/stat field %d: %w", pid, k, err)
		}
		return v
	}
	s.ppid = int(num(4))
	s.utime, s.stime, s.cutime, s.cstime = num(14), num(15), num(16), num(17)
	s.threads = int(num(20))
	return s, perr
}

// liveCPU is one process's own user+system CPU so far (not its children's).
// A single-threaded process (every Postgres process) is read from
// /proc/<pid>/schedstat, its on-CPU time in nanoseconds, which is exactly
// utime+stime before their truncation to 10 ms ticks: a server of 40
// backends would otherwise carry up to 40 ticks of rounding per reading.
// A multi-threaded one (MinIO) falls back to the ticks, which cover all
// its threads where schedstat covers one.
func liveCPU(pid int, s procStat) time.Duration {
	ticks := time.Duration(s.utime+s.stime) * clockTick
	if s.threads != 1 {
		return ticks
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "schedstat"))
	if err != nil {
		return ticks
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ticks
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return ticks
	}
	return time.Duration(ns)
}

// procTreeCPU is the CPU time a server process has used so far, its
// descendants included: its own, every live descendant's (found by walking
// /proc/*/stat for the process tree under root), and that of the children
// it has already waited for (its cutime and cstime, which hold their
// descendants' in turn). A child reaped while the tree is walked would be
// counted twice or not at all, so a walk during which root's cutime or
// cstime moved is done again.
func procTreeCPU(root int) (time.Duration, error) {
	for range 10 {
		first, err := readProcStat(root)
		if err != nil {
			return 0, fmt.Errorf("server process %d: %w", root, err)
		}
		total := liveCPU(root, first)
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return 0, err
		}
		stats := map[int]procStat{}
		children := map[int][]int{}
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == root {
				continue
			}
			s, err := readProcStat(pid)
			if err != nil {
				continue // exited since the listing: its parent's cutime has it
			}
			stats[pid] = s
			children[s.ppid] = append(children[s.ppid], pid)
		}
		for queue := children[root]; len(queue) > 0; queue = queue[1:] {
			pid := queue[0]
			total += liveCPU(pid, stats[pid])
			queue = append(queue, children[pid]...)
		}
		last, err := readProcStat(root)
		if err != nil {
			return 0, fmt.Errorf("server process %d: %w", root, err)
		}
		if last.cutime == first.cutime && last.cstime == first.cstime {
			return total + time.Duration(last.cutime+last.cstime)*clockTick, nil
		}
	}
	return 0, fmt.Errorf("server process %d: its children kept exiting while its tree was read", root)
}

// postmasterPID reads the postmaster's pid from the first line of
// postmaster.pid in a Postgres data directory.
func postmasterPID(dataDir string) (int, error) {
	if dataDir == "" {
		return 0, errors.New("no Postgres data directory (-pg-data, BENCH_PG_DATA): its server's CPU is unknown")
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("%s/postmaster.pid: %w", dataDir, err)
	}
	return pid, nil
}
