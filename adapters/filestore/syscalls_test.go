//go:build unix

package filestore_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/storage"
)

// syscallChildEnv runs syscallChild: "<dir> <op> <n>".
const syscallChildEnv = "CONVEYOR_FILESTORE_SYSCALL_CHILD"

// fileCalls are the system calls a Store makes on files, directories and
// their descriptors (and the runtime makes for an *os.File: epoll_ctl,
// fcntl). The rest (futex, nanosleep, epoll_pwait, mmap...) are the Go
// runtime's and vary from run to run.
var fileCalls = map[string]bool{
	"openat": true, "open": true, "close": true, "read": true, "write": true,
	"pread64": true, "pwrite64": true, "lseek": true, "fstat": true,
	"newfstatat": true, "statx": true, "fcntl": true, "flock": true,
	"epoll_ctl": true, "fgetxattr": true, "getxattr": true, "lgetxattr": true,
	"fsetxattr": true, "setxattr": true, "renameat": true, "renameat2": true,
	"unlinkat": true, "mkdirat": true, "getdents64": true, "fsync": true,
	"fdatasync": true, "syncfs": true, "ftruncate": true,
}

// TestFileCallsPerOp guards issue 22's gain: the system calls a lone
// durable Put makes on files, counted by strace(1) over a child process
// that makes 100 of them (less one that makes none): at most 15 for an
// update or a create, its own two fsyncs and the directory's open and
// close included (concurrent writers share syncs and make fewer), and
// at most 6 for a Get and 10 for a durable Delete. Before issue 22 they
// took 35, 26, 11 and 23 (after it, 14, 13, 5 and 8). Skipped where
// strace cannot run, and off Linux, unless CONVEYOR_REQUIRE_STRACE is set
// (CI sets it): then a missing strace fails the test.
func TestFileCallsPerOp(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes under strace")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the system call names are Linux's")
	}
	skip := t.Skipf
	if os.Getenv("CONVEYOR_REQUIRE_STRACE") != "" {
		skip = t.Fatalf
	}
	straceBin, err := exec.LookPath("strace")
	if err != nil {
		skip("no strace (scripts/install-tools.sh strace installs it)")
	}
	if b, err := exec.CommandContext(t.Context(), straceBin, "-f", "-c", "-o", os.DevNull, "true").CombinedOutput(); err != nil {
		skip("strace cannot run here: %v: %s", err, b)
	}
	const n = 100
	for _, tc := range []struct {
		op     string
		budget float64
	}{
		{"update", 15},
		{"create", 15},
		{"get", 6},
		{"delete", 10},
	} {
		t.Run(tc.op, func(t *testing.T) {
			s := newStore(t)
			if _, err := s.Put(t.Context(), "jobs/u.json", benchValue, storage.IfNotExists()); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if _, err := s.Put(t.Context(), fmt.Sprintf("jobs/d%d.json", i), benchValue, storage.IfNotExists()); err != nil {
					t.Fatal(err)
				}
			}
			count := func(ops int) map[string]int {
				out := t.TempDir() + "/strace"
				cmd := exec.CommandContext(t.Context(), straceBin, "-f", "-c", "-o", out, os.Args[0], "-test.run=^$")
				// updatemaxprocs=0: the runtime otherwise re-reads the
				// cgroup's CPU limit now and then (a pread64), which a run
				// slowed by load counts against the store.
				cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", syscallChildEnv, s.Root(), tc.op, ops), "GODEBUG=updatemaxprocs=0")
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("child under strace: %v: %s", err, b)
				}
				b, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				return straceCounts(b)
			}
			base, with := count(0), count(n)
			var total float64
			var per []string
			for name, c := range with {
				if d := float64(c-base[name]) / n; fileCalls[name] && d > 0 {
					total += d
					per = append(per, fmt.Sprintf("%s %.2f", name, d))
				}
			}
			t.Logf("%s: %.2f file system calls per op (%s)", tc.op, total, strings.Join(per, ", "))
			if total > tc.budget {
				t.Fatalf("%s makes %.2f file system calls per op, over its budget of %v", tc.op, total, tc.budget)
			}
		})
	}
}

// straceCounts parses the table strace -c writes: calls per system call.
func straceCounts(b []byte) map[string]int {
	counts := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[len(f)-1] == "total" {
			continue
		}
		if _, err := strconv.ParseFloat(f[0], 64); err != nil {
			continue // the header and rules
		}
		if calls, err := strconv.Atoi(f[3]); err == nil {
			counts[f[len(f)-1]] = calls
		}
	}
	return counts
}

// syscallChild is TestFileCallsPerOp's child: n operations of one kind,
// one at a time, on the store the parent prepared.
func syscallChild(arg string) int {
	f := strings.Fields(arg)
	if len(f) != 3 {
		fmt.Fprintln(os.Stderr, "bad argument", arg)
		return 1
	}
	n, _ := strconv.Atoi(f[2])
	s, err := openStore(f[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	var v storage.Version
	if f[1] == "update" {
		if _, v, err = s.Get(ctx, "jobs/u.json"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	for i := range n {
		switch f[1] {
		case "update":
			v, err = s.Put(ctx, "jobs/u.json", benchValue, storage.IfMatch(v))
		case "create":
			_, err = s.Put(ctx, fmt.Sprintf("jobs/c%d.json", i), benchValue, storage.IfNotExists())
		case "get":
			_, _, err = s.Get(ctx, "jobs/u.json")
		case "delete":
			err = s.Delete(ctx, fmt.Sprintf("jobs/d%d.json", i), storage.Condition{})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}
