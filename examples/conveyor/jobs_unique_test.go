package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestJobsEnqueueUnique: jobs enqueue -unique, -unique-key and
// -unique-period create a unique job once; the same again prints that
// job with "duplicate": true.
func TestJobsEnqueueUnique(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := memstore.New()
	q, err := jobqueue.New(jobqueue.Config{Store: store, Clock: clock.NewFake(time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)), Logger: quiet})
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
	enqueue := func(args ...string) lifecycle.Job {
		t.Helper()
		code, out, errs := conveyor(t, ts.URL, append([]string{"jobs", "enqueue", "BRIEF", "-agent", "a"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		var j lifecycle.Job
		if err := json.Unmarshal([]byte(out), &j); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return j
	}
	for _, args := range [][]string{
		{"-unique", "-payload", `{"to":"a"}`},
		{"-unique-key", "nightly", "-unique-period", "24h"},
	} {
		first, again := enqueue(args...), enqueue(args...)
		if first.Duplicate || !again.Duplicate || again.JobID != first.JobID {
			t.Fatalf("%v: %s then %s duplicate %v; want the first answered again", args, first.JobID, again.JobID, again.Duplicate)
		}
	}
}
