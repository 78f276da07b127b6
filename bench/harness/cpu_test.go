package harness

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// spinEnv makes the test binary a process that burns its value's CPU
// time (a Go duration), prints "spun" and then sleeps until killed or, with
// a value ending in "!", exits at once.
const spinEnv = "CONVEYOR_BENCH_SPIN"

func init() {
	v := os.Getenv(spinEnv)
	if v == "" {
		return
	}
	d, err := time.ParseDuration(strings.TrimSuffix(v, "!"))
	if err != nil {
		os.Exit(2)
	}
	for {
		c, err := processCPU()
		if err != nil {
			os.Exit(2)
		}
		if c >= d {
			break
		}
		for i := 0; i < 1e6; i++ {
			_ = i * i
		}
	}
	fmt.Println("spun")
	if strings.HasSuffix(v, "!") {
		os.Exit(0)
	}
	time.Sleep(time.Minute)
	os.Exit(0)
}

// TestProcTreeCPU: a server's CPU includes a descendant that is alive
// (a grandchild of the root, read live) and one that exited (in the
// root's cutime/cstime), each at least the CPU it burned, and not much
// more (the shell in between is nearly idle).
func TestProcTreeCPU(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const burn = 300 * time.Millisecond
	for _, tc := range []struct {
		name, script, spin string
	}{
		// sh runs the spinner in the background and waits: the spinner is
		// sh's live child when read.
		{"live descendant", `"$0" & wait`, burn.String()},
		// sh runs it in the foreground, so it has reaped it before it
		// echoes; then it sleeps, its child gone.
		{"exited child", `"$0"; echo reaped; sleep 60`, burn.String() + "!"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", tc.script, exe)
			cmd.Env = append(os.Environ(), spinEnv+"="+tc.spin)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// The live case's spinner is sh's child: kill the group.
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				_ = cmd.Wait()
			})
			sc := bufio.NewScanner(out)
			want := "spun"
			if strings.HasSuffix(tc.spin, "!") {
				want = "reaped"
			}
			for sc.Scan() && sc.Text() != want {
			}
			if sc.Text() != want {
				t.Fatalf("no %q from the script", want)
			}
			got, err := procTreeCPU(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			// The spinner's multi-threaded, read in 10 ms ticks, truncated.
			if lo, hi := burn-2*clockTick, burn+200*time.Millisecond; got < lo || got > hi {
				t.Fatalf("procTreeCPU = %v, want %v to %v", got, lo, hi)
			}
			t.Logf("%v", got)
		})
	}
}
