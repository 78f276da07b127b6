package run_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// helperEnv makes the test binary act as a runner process (see helperMain):
// its value is the directory the processes share.
const helperEnv = "CONVEYOR_LIFECYCLE_HELPER"

// killAgent's steps append their name to dir/executions.log each time they
// run, so the test can count executions across processes. In the victim
// process "render" announces itself and then hangs until it is killed.
func killAgent(dir string, victim bool) run.Agent {
	record := func(name string) error { return logExecution(dir, name) }
	step := func(name string, resumable, idempotent bool, body func(ctx context.Context) error) run.Step {
		return run.Step{Name: name, Resumable: resumable, Idempotent: idempotent,
			Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				if err := record(name); err != nil {
					return run.StepOutput{}, err
				}
				if body != nil {
					if err := body(ctx); err != nil {
						return run.StepOutput{}, err
					}
				}
				return run.StepOutput{Summary: name, Data: json.RawMessage(`"` + name + `"`)}, nil
			}}
	}
	hang := func(ctx context.Context) error {
		if !victim {
			return nil
		}
		if err := os.WriteFile(filepath.Join(dir, "in-render"), nil, 0o644); err != nil {
			return err
		}
		<-ctx.Done() // until SIGKILL
		return ctx.Err()
	}
	return run.Agent{Slug: "killable", Steps: []run.Step{
		step("fetch", true, true, nil),
		step("charge", true, false, nil), // a side effect that must never repeat
		step("render", false, true, hang),
		step("publish", false, false, nil),
	}}
}

// Environment of the victim process for the MinIO variant.
const (
	helperS3Endpoint = "CONVEYOR_LIFECYCLE_HELPER_S3"
	helperS3Bucket   = "CONVEYOR_LIFECYCLE_HELPER_BUCKET"
	helperS3Prefix   = "CONVEYOR_LIFECYCLE_HELPER_PREFIX"
	// helperSQLite: "1" puts the processes on a SQLite file in the shared
	// directory.
	helperSQLite = "CONVEYOR_LIFECYCLE_HELPER_SQLITE"
)

// sqliteIn opens the SQLite file the processes share in dir.
func sqliteIn(dir string) (*storage.Store, error) {
	return sqlitestore.New(context.Background(), sqlitestore.Config{Path: filepath.Join(dir, "store.db")})
}

// sqliteFor opens the shared SQLite file for the test's side, closed
// when t ends.
func sqliteFor(t *testing.T, dir string) *storage.Store {
	t.Helper()
	s, err := sqliteIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// helperStore opens the store the processes share: MinIO or a SQLite
// file when the parent said so, else a filestore in the shared directory.
func helperStore(dir string) (*storage.Store, error) {
	if os.Getenv(helperSQLite) == "1" {
		return sqliteIn(dir)
	}
	if endpoint := os.Getenv(helperS3Endpoint); endpoint != "" {
		return s3store.New(context.Background(), s3store.Config{
			Endpoint: endpoint, Bucket: os.Getenv(helperS3Bucket), Prefix: os.Getenv(helperS3Prefix),
			Region: "us-east-1", UsePathStyle: true,
			AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		})
	}
	return filestore.New(filepath.Join(dir, "store"))
}

// helperMain is the victim process: one run of killAgent.
func helperMain() int {
	return victimMain(helperEnv, 500*time.Millisecond, func(dir string, _ **run.Runner, _ *string) run.Agent { return killAgent(dir, true) })
}

func TestSIGKILLedRunnerIsTakenOver(t *testing.T) {
	t.Parallel()
	onKillStores(t, true, testSIGKILL)
}

func testSIGKILL(t *testing.T, dir string, env []string, open func() *storage.Store) {
	v, runID := startVictim(t, helperEnv, dir, env)
	until(t, "the victim to enter render", func() bool {
		_, err := os.Stat(filepath.Join(dir, "in-render"))
		return err == nil
	})
	v.kill(t)

	// A second runner, whose clock reads past the victim's lease.
	st, r := rescue(t, v, open(), killAgent(dir, false), runID)
	if st.Status != "completed" || st.ResumeCount != 1 || st.StepsCompleted != 4 {
		t.Fatalf("after takeover: %+v", st)
	}
	got := executions(t, dir)
	want := []string{"fetch", "charge", "render", "render", "publish"}
	if !slices.Equal(got, want) {
		t.Errorf("executions %v, want %v: charge (not idempotent) once, render (idempotent) replayed", got, want)
	}
	steps, err := r.Steps(context.Background(), runID)
	if err != nil || len(steps) != 4 {
		t.Fatalf("step files %+v (%v)", steps, err)
	}
	for i, s := range steps {
		wantEpoch := int64(1)
		if i >= 2 {
			wantEpoch = 2
		}
		if s.Status != lifecycle.StepCompleted || s.Epoch != wantEpoch {
			t.Errorf("step %d: %s by epoch %d, want completed by epoch %d", s.StepNumber, s.Status, s.Epoch, wantEpoch)
		}
	}
}
