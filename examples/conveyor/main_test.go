package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// childEnv, set, makes the test binary the conveyor command itself: the
// conformance command ends its process, so its tests run it as one.
const childEnv = "CONVEYOR_CLI_TEST_CHILD"

var minio miniotest.Shared

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		main()
	}
	code := m.Run()
	if err := minio.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping MinIO:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// worker is a Worker surface on a memstore: a Runner with a quick agent
// and one that waits for approval, the API with its event feed.
func worker(t *testing.T) (string, *run.Runner) {
	t.Helper()
	store := memstore.New()
	ok := func(summary string, await *run.Await) func(context.Context, run.StepInput) (run.StepOutput, error) {
		return func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Summary: summary, Await: await}, nil
		}
	}
	// The step after the gate says what the decision handed it.
	published := func(_ context.Context, in run.StepInput) (run.StepOutput, error) {
		if in.Approval == nil {
			return run.StepOutput{Summary: "published without a decision"}, nil
		}
		return run.StepOutput{Summary: "published " + string(in.Approval.Payload)}, nil
	}
	r, err := run.NewRunner(run.Config{Store: store, Logger: quiet, PollInterval: 20 * time.Millisecond},
		run.Agent{Slug: "quick", Steps: []run.Step{{Name: "one", Run: ok("first", nil)}, {Name: "two", Run: ok("second", nil)}}},
		run.Agent{Slug: "gated", Machine: lifecycle.MachineApproval, Steps: []run.Step{
			{Name: "draft", Run: ok("drafted", &run.Await{Approval: "publish"})}, {Name: "publish", Run: published}}})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := schedule.New(schedule.Config{Runner: r, Store: store, Logger: quiet,
		Schedules: []schedule.Schedule{{ID: "hourly-digest", Agent: "quick", Cron: "@hourly"}}})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, r, store, httpapi.Config{Schedules: sched.View()}), r
}

// quiet discards the logs of the Workers the tests serve.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serve serves cfg's API over r on store, with its event feed, and runs
// the Runner and the feed until the test ends: the API's URL.
func serve(t *testing.T, r *run.Runner, store *storage.Store, cfg httpapi.Config) string {
	t.Helper()
	cfg.Runner, cfg.Store, cfg.Events, cfg.EventPollInterval, cfg.Logger = r, store, true, 20*time.Millisecond, quiet
	srv, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = r.Run(ctx); done <- struct{}{} }()
	go func() { _ = srv.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		ts.Close()
	})
	return ts.URL
}

// conveyor runs the CLI and returns its exit code and output.
func conveyor(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := cli(ctx, append([]string{"-addr", url}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCommands(t *testing.T) {
	t.Parallel()
	url, _ := worker(t)

	code, out, errs := conveyor(t, url, "submit", "quick", "-watch")
	if code != 0 || !strings.Contains(out, "completed") || !strings.Contains(out, "2/2") {
		t.Fatalf("submit -watch: %d\n%s%s", code, out, errs)
	}
	runID := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])

	tests := []struct {
		args []string
		code int
		want []string // in stdout, or stderr for a failure
	}{
		{[]string{"agents"}, 0, []string{"quick", "gated", "approval", "draft, publish"}},
		{[]string{"status", runID}, 0, []string{`"status": "completed"`, `"steps_completed": 2`, `"source": "cli"`}},
		{[]string{"steps", runID}, 0, []string{"one", "two", "second"}},
		{[]string{"runs", "quick"}, 0, []string{runID, "2/2"}},
		{[]string{"runs", "-status", "completed", "-limit", "1", "-all"}, 0, []string{runID, "quick"}},
		{[]string{"runs", "quick", "-limit", "501"}, 1, []string{"INVALID_REQUEST"}},
		{[]string{"runs", "quick", "-cursor", "zz"}, 1, []string{"INVALID_CURSOR"}},
		{[]string{"watch", runID}, 0, []string{"run " + runID + " completed"}},
		{[]string{"cancel", runID, "-reason", "late"}, 1, []string{"409", "RUN_UNSUPPORTED_OPERATION"}},
		{[]string{"status", "run-nope"}, 1, []string{"RUN_NOT_FOUND"}},
		{[]string{"-actor", "frontend", "submit", "quick"}, 1, []string{"FORBIDDEN"}},
		{[]string{"-actor", "admin", "quarantine"}, 0, []string{"QKEY"}},
		{[]string{"quarantine"}, 1, []string{"FORBIDDEN"}},
		{[]string{"machine", "approval"}, 0, []string{"stateDiagram-v2", "awaiting_approval"}},
		{[]string{"machine", "job", "-format", "dot"}, 0, []string{"digraph", "RETRY_BACKOFF"}},
		{[]string{"machine", "nope"}, 2, []string{"unknown machine"}},
		{[]string{"status"}, 2, []string{"takes 1 argument"}},
		{[]string{"frobnicate"}, 2, []string{"unknown command"}},
		{[]string{"jobs"}, 1, []string{"NOT_FOUND"}}, // this Worker serves no job queue
		{[]string{"-actor", "admin", "cancel-job", "job-1"}, 1, []string{"NOT_FOUND"}},
		{[]string{"cancel-job"}, 2, []string{"cancel-job -status"}},
		{[]string{"machine", "general-job"}, 0, []string{"stateDiagram-v2", "RUNNING --> CANCELLED"}},
		{[]string{"schedules"}, 0, []string{"hourly-digest", "@hourly", "active"}},
		{[]string{"schedules", "pause", "hourly-digest"}, 1, []string{"FORBIDDEN"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, out, errs := conveyor(t, url, tt.args...)
			got := out
			if tt.code != 0 {
				got = errs
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q not in\n%s", w, got)
				}
			}
		})
	}
}

// TestApprovalFlow: a run waits at its gate; approve lets it finish, its
// payload handed to the step after the gate; reject fails it.
func TestApprovalFlow(t *testing.T) {
	t.Parallel()
	url, r := worker(t)
	for _, decision := range []string{"approve", "reject"} {
		code, out, errs := conveyor(t, url, "submit", "gated")
		if code != 0 {
			t.Fatalf("submit: %d %s", code, errs)
		}
		id := strings.TrimSpace(out)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := r.Wait(ctx, id) // returns when the run parks at its gate
		cancel()
		if err != nil || st.Status != "awaiting_approval" {
			t.Fatalf("run at its gate: %s, %v", st.Status, err)
		}
		if code, _, errs := conveyor(t, url, decision, id, "-payload", `{"title":`); code != 2 || !strings.Contains(errs, "-payload is not valid JSON") {
			t.Fatalf("%s with a bad payload: %d %s", decision, code, errs)
		}
		if code, out, errs := conveyor(t, url, decision, id, "-reason", "looked at it", "-payload", `{"title": "v2"}`); code != 0 || !strings.Contains(out, `"payload_sha256"`) {
			t.Fatalf("%s: %d %s %s", decision, code, out, errs)
		}
		code, out, errs = conveyor(t, url, "watch", id)
		want, wantCode := "completed", 0
		if decision == "reject" {
			want, wantCode = "APPROVAL_REJECTED", 1
		}
		if code != wantCode || !strings.Contains(out+errs, want) {
			t.Fatalf("watch after %s: %d\n%s%s", decision, code, out, errs)
		}
		if decision == "approve" {
			if code, out, errs := conveyor(t, url, "steps", id); code != 0 || !strings.Contains(out, `published {"title":"v2"}`) {
				t.Errorf("steps after approve: %d %s %s", code, out, errs)
			}
		}
	}
}

func TestAddrTakesHostPortOrURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr, want string
		bad        bool
	}{
		{addr: "127.0.0.1:8080", want: "http://127.0.0.1:8080"},
		{addr: "localhost:9000", want: "http://localhost:9000"},
		{addr: "http://127.0.0.1:8080/", want: "http://127.0.0.1:8080"},
		{addr: "https://conveyor.example:443/api", want: "https://conveyor.example:443/api"},
		{addr: "ftp://127.0.0.1:21", bad: true},
		{addr: "http://", bad: true},
		{addr: "127.0.0.1:port", bad: true},
	}
	for _, tt := range tests {
		got, err := baseURL(tt.addr)
		if (err != nil) != tt.bad || got != tt.want && !tt.bad {
			t.Errorf("baseURL(%q) = %q, %v; want %q (error: %v)", tt.addr, got, err, tt.want, tt.bad)
		}
	}
}

func TestAddrAsTheWorkerTakesIt(t *testing.T) {
	t.Parallel()
	url, _ := worker(t)
	code, out, errs := conveyor(t, strings.TrimPrefix(url, "http://"), "agents")
	if code != 0 || !strings.Contains(out, "quick") {
		t.Fatalf("agents with -addr host:port: %d\n%s%s", code, out, errs)
	}
}

// TestPrintSchedules: the schedules table names what each schedule
// starts, a run of an agent or a periodic job (and its tenant), and the
// run or job of its latest slot.
func TestPrintSchedules(t *testing.T) {
	t.Parallel()
	next := time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)
	infos := []lifecycle.ScheduleInfo{
		{Schedule: lifecycle.Schedule{ID: "digest", Agent: "quick", Cron: "@hourly"},
			ScheduleProgress: lifecycle.ScheduleProgress{Next: next, LastRunID: "run_1"}},
		{Schedule: lifecycle.Schedule{ID: "nightly", Every: time.Hour, Job: &lifecycle.ScheduleJob{JobType: "SEND_EMAIL", AgentSlug: "mail"}, Tenant: "acme"},
			ScheduleProgress: lifecycle.ScheduleProgress{Next: next, LastJobID: "scheduler:nightly:2026-03-01T01:00:00Z", Paused: true, PausedBy: "ops"}},
	}
	var out bytes.Buffer
	if err := printSchedules(&out, infos); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := [][]string{
		{"SCHEDULE", "STARTS", "LAST"},
		{"digest", "run of quick", "@hourly", "run_1", "active"},
		{"nightly", "job SEND_EMAIL in mail for acme", "every 1h0m0s", "scheduler:nightly:2026-03-01T01:00:00Z", "paused by ops"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, ws := range want {
		for _, w := range ws {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
}
