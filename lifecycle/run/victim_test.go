package run_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// The kill -9 tests share one shape: this test binary, started again with
// an environment variable naming a directory, is the victim; it runs one
// run of an agent on the store in that directory, prints the run id, and
// is killed by the parent at a point a step marks with a file.

// victimMain is the victim's side: a runner (owner "victim", a 2 s lease)
// on the store of the directory in envVar, with the agent agent(dir,
// runner, run id) builds, that submits one run of it, prints its id and
// executes it until killed. The agent sees the runner and run id through
// pointers, set before any step runs.
func victimMain(envVar string, heartbeat time.Duration, agent func(dir string, r **run.Runner, runID *string) run.Agent) int {
	dir := os.Getenv(envVar)
	store, err := helperStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var r *run.Runner
	var runID string
	a := agent(dir, &r, &runID)
	r, err = run.NewRunner(run.Config{
		Store: store, Owner: "victim", Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		LeaseDuration: 2 * time.Second, HeartbeatInterval: heartbeat,
	}, a)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: a.Slug})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	runID = res.RunID
	fmt.Println(res.RunID)
	_ = r.Run(context.Background())
	return 0
}

// victim is the parent's handle on a victim process.
type victim struct {
	cmd    *exec.Cmd
	stderr strings.Builder
	done   bool
}

// startVictim starts the victim with envVar=dir and env, and returns it
// with the run id it printed; the test's end kills it if the test did not.
func startVictim(t *testing.T, envVar, dir string, env []string) (*victim, string) {
	t.Helper()
	v := &victim{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	v.cmd.Env = append(append(os.Environ(), envVar+"="+dir), env...)
	stdout, err := v.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	v.cmd.Stderr = &v.stderr
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !v.done {
			_ = v.cmd.Process.Kill()
			_ = v.cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("victim printed no run id: %v\n%s", err, v.stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return v, strings.TrimSpace(line)
}

// kill sends SIGKILL (no cleanup of any kind) and waits for the end.
func (v *victim) kill(t *testing.T) {
	t.Helper()
	if err := v.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = v.cmd.Wait()
	v.done = true
}
