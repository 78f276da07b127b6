package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestJobsEnqueue: jobs enqueue creates a job with its priority and run
// time (-delay by the Worker's clock, -run-at, the later of both), jobs
// lists them with both, and a bad flag is a usage error that sends
// nothing.
func TestJobsEnqueue(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := memstore.New()
	q, err := jobqueue.New(jobqueue.Config{Store: store, Clock: clock.NewFake(t0), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }
	r, err := run.NewRunner(run.Config{Store: store, Logger: quiet}, run.Agent{Slug: "quick", Steps: []run.Step{{Name: "one", Run: noop}}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Runner: r, Queue: q, Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	tests := []struct {
		args     []string
		code     int
		priority int        // of the job answered
		at       *time.Time // its scheduled_at
		want     string     // in stderr, for a failure
	}{
		{args: []string{"jobs", "enqueue", "BRIEF", "-agent", "a", "-job-id", "late", "-priority", "8", "-delay", "1h"},
			priority: 8, at: new(t0.Add(time.Hour))},
		{args: []string{"jobs", "enqueue", "BRIEF", "-job-id", "at", "-run-at", "2026-02-24T12:00:00Z", "-delay", "1h", "-payload", `{"n":1}`},
			at: new(t0.Add(2 * time.Hour))},
		{args: []string{"jobs", "enqueue", "BRIEF", "-job-id", "now"}},
		{args: []string{"jobs", "enqueue", "BRIEF", "-priority", "10"}, code: 1, want: "priority 10 outside 1..9"},
		{args: []string{"jobs", "enqueue", "BRIEF", "-run-at", "noon"}, code: 2, want: "-run-at is not an RFC 3339 time"},
		{args: []string{"jobs", "enqueue", "BRIEF", "-payload", "{"}, code: 2, want: "-payload is not JSON"},
		{args: []string{"jobs", "enqueue"}, code: 2, want: "enqueue <type>"},
	}
	for _, tt := range tests {
		code, out, errs := conveyor(t, ts.URL, tt.args...)
		if code != tt.code {
			t.Fatalf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", tt.args, code, tt.code, out, errs)
		}
		if code != 0 {
			if !strings.Contains(errs, tt.want) {
				t.Errorf("%v: %q not in %s", tt.args, tt.want, errs)
			}
			continue
		}
		var j lifecycle.Job
		if err := json.Unmarshal([]byte(out), &j); err != nil {
			t.Fatalf("%v: %v\n%s", tt.args, err, out)
		}
		if j.Priority != tt.priority || (j.ScheduledAt == nil) != (tt.at == nil) || tt.at != nil && !j.ScheduledAt.Equal(*tt.at) {
			t.Errorf("%v: priority %d, scheduled_at %v; want %d, %v", tt.args, j.Priority, j.ScheduledAt, tt.priority, tt.at)
		}
	}
	code, out, errs := conveyor(t, ts.URL, "jobs")
	if code != 0 {
		t.Fatalf("jobs: %d %s", code, errs)
	}
	for _, want := range []string{"PRIORITY", "SCHEDULED", "2026-02-24T11:00:00Z", "2026-02-24T12:00:00Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs: %q not in\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 4 {
		t.Errorf("jobs lists %d lines, want a header and 3 jobs:\n%s", n, out)
	}
}
