package run_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
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

// victimTest is one kill -9 test over a store: the directory the victim
// and the test share, the victim's extra environment, and how the test
// opens the store the victim wrote.
type victimTest func(t *testing.T, dir string, env []string, open func() *storage.Store)

// onKillStores runs test as parallel subtests on a filestore and a SQLite
// file in a shared directory, and with minio on a prefix of the test MinIO.
func onKillStores(t *testing.T, minio bool, test victimTest) {
	t.Run("filestore", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		test(t, dir, nil, func() *storage.Store {
			s, err := filestore.New(filepath.Join(dir, "store"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		test(t, dir, []string{helperSQLite + "=1"}, func() *storage.Store { return sqliteFor(t, dir) })
	})
	if !minio {
		return
	}
	t.Run("minio", func(t *testing.T) {
		t.Parallel()
		srv, bucket := env.MinIO(t)
		prefix := fmt.Sprintf("kill-%d/", time.Now().UnixNano())
		s := env.S3At(t, prefix)
		vars := []string{helperS3Endpoint + "=" + srv.Endpoint, helperS3Bucket + "=" + bucket, helperS3Prefix + "=" + prefix,
			"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
		test(t, t.TempDir(), vars, func() *storage.Store { return s })
	})
}

// logExecution appends name to dir/executions.log: the steps of the kill
// tests' agents record each run there, so a test counts executions across
// processes.
func logExecution(dir, name string) error {
	f, err := os.OpenFile(filepath.Join(dir, "executions.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, name)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// executions reads dir/executions.log back, in order.
func executions(t *testing.T, dir string) []string {
	t.Helper()
	log, err := os.ReadFile(filepath.Join(dir, "executions.log"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(log))
}

// rescue runs a second runner (owner "rescuer", its clock past the
// victim's lease) on store with agent until run runID rests (ends or
// parks), within 30 s, and returns the run's status then, with the runner
// (stopped: for its reads).
func rescue(t *testing.T, v *victim, store *storage.Store, agent run.Agent, runID string) (lifecycle.RunStatus, *run.Runner) {
	t.Helper()
	clk := clock.NewFake(time.Now().Add(time.Hour))
	r, err := run.NewRunner(run.Config{Store: store, Owner: "rescuer", Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, agent)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	st, err := r.Wait(wctx, runID)
	if err != nil {
		t.Fatalf("wait: %v (victim said:\n%s)", err, v.stderr.String())
	}
	return st, r
}
