package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestCancelJobRoute: POST /jobs/{jobId}/cancel over the Go client. A
// QUEUED job ends CANCELLED at once; a RUNNING one, whose handler ignores
// its context, comes back RUNNING with its cancel asked for and ends
// CANCELLED by its Worker's heartbeat; a finished job, a job of an NLM
// type, an unknown job and an actor other than the admin are refused with
// their codes.
func TestCancelJobRoute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const email lifecycle.JobType = "SEND_EMAIL"
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := memstore.New()
	runner, err := run.NewRunner(run.Config{Store: store, Owner: "test", Logger: log}, run.Agent{Slug: "quick", Steps: []run.Step{quickStep("load")}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := jobqueue.New(jobqueue.Config{Store: store, Logger: log, LeaseTTL: 600 * time.Millisecond,
		Types: map[lifecycle.JobType]jobqueue.TypeConfig{email: {Handler: jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
			entered <- struct{}{}
			<-release // ignores its context
			return lifecycle.JobOutput{Content: json.RawMessage(`{}`)}, nil
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := httpapi.New(httpapi.Config{Runner: runner, Queue: q, Tokens: tokens, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	as := func(tok string) *client.Client {
		return &client.Client{BaseURL: srv.URL, HTTP: srv.Client(), Token: tok}
	}
	gw := as("tok-gateway")
	admin, gwOp := client.Operator{Client: as("tok-admin")}, client.Operator{Client: gw}

	for _, n := range []lifecycle.NewJob{{JobID: "queued", JobType: email, AgentSlug: "a"}, {JobID: "brief", JobType: lifecycle.JobBrief, AgentSlug: "b"}} {
		if _, err := gw.Enqueue(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	refusals := []struct {
		name, job string
		c         client.Operator
		status    int
		code      string
		sentinel  error
	}{
		{"the gateway", "queued", gwOp, http.StatusForbidden, codes.Forbidden, lifecycle.ErrForbiddenActor},
		{"an NLM type", "brief", admin, http.StatusConflict, codes.JobNotCancellable, lifecycle.ErrJobNotCancellable},
		{"no such job", "nope", admin, http.StatusNotFound, codes.JobNotFound, lifecycle.ErrNotFound},
	}
	for _, tt := range refusals {
		_, err := tt.c.CancelJob(ctx, tt.job)
		apiError(t, err, tt.status, tt.code)
		if !errors.Is(err, tt.sentinel) {
			t.Errorf("%s: %v does not match %v", tt.name, err, tt.sentinel)
		}
	}
	j, err := admin.CancelJob(ctx, "queued")
	if err != nil || j.Status != lifecycle.JobCancelled || j.ErrorCode != codes.JobCancelled {
		t.Fatalf("CancelJob(QUEUED) = %s %q, %v", j.Status, j.ErrorCode, err)
	}
	_, err = admin.CancelJob(ctx, "queued")
	apiError(t, err, http.StatusConflict, codes.JobFinished)
	if !errors.Is(err, lifecycle.ErrJobFinished) {
		t.Errorf("%v does not match ErrJobFinished", err)
	}

	// A RUNNING job, on a Worker.
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- (&jobqueue.Worker{Queue: q, ID: "w1", PollInterval: 10 * time.Millisecond}).Run(wctx) }()
	t.Cleanup(func() {
		releaseOnce.Do(func() { close(release) })
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if _, err := gw.Enqueue(ctx, lifecycle.NewJob{JobID: "running", JobType: email, AgentSlug: "a"}); err != nil {
		t.Fatal(err)
	}
	<-entered
	j, err = admin.CancelJob(ctx, "running")
	if err != nil || j.Status != lifecycle.JobRunning || j.CancelRequestedAt == nil {
		t.Fatalf("CancelJob(RUNNING) = %s asked %v, %v", j.Status, j.CancelRequestedAt, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for j.Status == lifecycle.JobRunning && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if j, err = admin.Client.Job(ctx, "running"); err != nil {
			t.Fatal(err)
		}
	}
	if j.Status != lifecycle.JobCancelled || j.ErrorCode != codes.JobCancelled || j.Attempt != 1 {
		t.Fatalf("the RUNNING job ended %s %q attempt %d, want CANCELLED", j.Status, j.ErrorCode, j.Attempt)
	}
}
