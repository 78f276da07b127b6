package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestJobCommands: history, queues and the bulk requeue against a Worker
// serving a job queue with dead jobs.
func TestJobCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := jobqueue.New(jobqueue.Config{Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r, err := run.NewRunner(run.Config{Store: store, Logger: quiet}, run.Agent{Slug: "quick", Steps: []run.Step{{Name: "one",
		Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Runner: r, Queue: q, Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	for i := range 3 {
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("job-%d", i), JobType: lifecycle.JobBrief, AgentSlug: fmt.Sprintf("a-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		cl, err := q.Claim(ctx, "w1")
		if err != nil || cl == nil {
			t.Fatalf("claim: %v %v", cl, err)
		}
		if _, err := cl.Run(ctx, jobqueue.Handlers{AssembleContext: func(context.Context, lifecycle.Job) (json.RawMessage, error) {
			return nil, jobqueue.Permanent(errors.New("no context"))
		}, CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{}, nil
		}}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"queues"}, 0, []string{"LANE", "a-0", "a-1", "a-2"}},
		{[]string{"history", "job-0"}, 0, []string{"job-0", "PENDING", "QUEUED", "ATTEMPT"}},
		{[]string{"history", "job-nope"}, 1, []string{"JOB_NOT_FOUND"}},
		{[]string{"requeue"}, 2, []string{"requeue -status"}},
		{[]string{"-actor", "gateway", "requeue", "-status", "DEAD"}, 1, []string{"FORBIDDEN"}},
		{[]string{"-actor", "admin", "queues", "pause", "default"}, 0, []string{"queue default paused"}},
		{[]string{"queues", "list"}, 0, []string{"QUEUE", "STATE", "a-0", "default", "paused"}},
		{[]string{"-actor", "admin", "queues", "resume", "default"}, 0, []string{"queue default resumed"}},
		{[]string{"queues"}, 0, []string{"active"}},
		{[]string{"-actor", "gateway", "queues", "pause", "default"}, 1, []string{"FORBIDDEN"}},
		{[]string{"-actor", "admin", "queues", "pause", "a.b"}, 1, []string{"INVALID_INPUT"}},
		{[]string{"queues", "stop", "x"}, 2, []string{"queues pause <queue>"}},
		{[]string{"-actor", "gateway", "cancel-job", "-status", "QUEUED"}, 1, []string{"FORBIDDEN"}},
		// The one QUEUED job is of an NLM type: refused, and said so.
		{[]string{"-actor", "admin", "cancel-job", "-status", "QUEUED"}, 1, []string{"1 job(s) not cancelled"}},
	}
	for _, tt := range tests {
		code, out, errs := conveyor(t, ts.URL, tt.args...)
		got := out
		if tt.code != 0 {
			got = errs
		}
		if code != tt.code {
			t.Fatalf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", tt.args, code, tt.code, out, errs)
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%v: %q not in\n%s", tt.args, w, got)
			}
		}
	}
	// One a call, then the rest with -all.
	code, out, errs := conveyor(t, ts.URL, "-actor", "admin", "requeue", "-status", "DEAD", "-limit", "1")
	if code != 0 || !strings.Contains(out, "1 requeued, 0 failed") || !strings.Contains(out, "more: -cursor ") {
		t.Fatalf("requeue -limit 1: %d\n%s%s", code, out, errs)
	}
	cursor := strings.TrimSpace(out[strings.Index(out, "more: -cursor ")+len("more: -cursor "):])
	code, out, errs = conveyor(t, ts.URL, "-actor", "admin", "requeue", "-status", "DEAD", "-cursor", cursor, "-all")
	if code != 0 || !strings.Contains(out, "1 requeued, 0 failed") || strings.Contains(out, "more:") {
		t.Fatalf("requeue -all: %d\n%s%s", code, out, errs)
	}
}
