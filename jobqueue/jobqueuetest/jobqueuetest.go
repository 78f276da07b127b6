// Package jobqueuetest tests your own job handlers under the SDK's real
// Queue, in milliseconds: in the spirit of River's rivertest.
//
// Run enqueues one job in a jobqueue.Queue on a memstore with a fake clock
// (starting 2026-01-01T00:00:00Z), claims it and runs its pipeline with your
// Handler (a Typed one, or the NLM pipeline's Handlers) through
// jobqueue.Claim, again after each backoff, until it is COMPLETE or DEAD,
// and returns the job and its artifact. The handler timeouts (StepTimeout,
// 120 s), attempts (3) and backoff (15 s, 30 s, 60 s) are the Queue's own,
// or an Option's, and take no real time: the fake clock moves only while
// the queue waits, to the next deadline it waits for.
//
// Time moves to a backoff's end, and to a handler's deadline while the
// handler waits in Hang: a fake upstream of yours that should never answer
// in a test waits with Hang(ctx), which, outside Run, is just <-ctx.Done().
// A handler that blocks any other way for 10 s of real time fails the test.
//
// RequireJob asserts the state of a job in any Queue, e.g. one your code
// enqueued into.
package jobqueuetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/testkit/testdrive"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Option changes the jobqueue.Config Run builds the Queue from, e.g. its
// StepTimeout, MaxAttempts, Backoff or Types. Run then sets Store (a
// memstore) and Clock (its fake clock), and a LeaseTTL long enough that
// heartbeats stay out of the test's way; Logger defaults to discarding.
type Option func(*jobqueue.Config)

// stall is how long, in real time, Run waits for a handler before it fails
// the test.
var stall = 10 * time.Second

// worker is the name Run claims jobs under.
const worker = "jobqueuetest"

// Run enqueues n (as the gateway) in a fresh Queue, runs it with h (a
// jobqueue.Handler: HandlerFunc, Typed, or the NLM pipeline's Handlers) until it
// is COMPLETE or DEAD, and returns the job as last written and its artifact
// (nil when it has none). User job types go in an Option's Config.Types.
// The test fails when the job is refused or cannot be run to its end.
func Run(tb testing.TB, h jobqueue.Handler, n jobqueue.NewJob, opts ...Option) (lifecycle.Job, *artifact.Artifact) {
	tb.Helper()
	clk := testdrive.NewClock()
	d := &driver{clk: clk}
	var cfg jobqueue.Config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.Store = memstore.New()
	cfg.Clock = clk
	cfg.LeaseTTL = testdrive.Far
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h = d.wrap(h)
	if len(cfg.Types) > 0 {
		types := make(map[lifecycle.JobType]jobqueue.TypeConfig, len(cfg.Types))
		for name, tc := range cfg.Types {
			tc.Handler = d.wrap(tc.Handler)
			types[name] = tc
		}
		cfg.Types = types
	}
	q, err := jobqueue.New(cfg)
	if err != nil {
		tb.Fatalf("jobqueuetest: %v", err)
	}
	ctx := context.Background()
	job, err := q.Enqueue(ctx, lifecycle.ActorGateway, n)
	if err != nil {
		tb.Fatalf("jobqueuetest: enqueue: %v", err)
	}
	for {
		job = get(tb, q, job.JobID)
		if job.Status == lifecycle.JobComplete || job.Status == lifecycle.JobDead {
			break
		}
		c, err := q.Claim(ctx, worker)
		if err != nil {
			tb.Fatalf("jobqueuetest: claim: %v", err)
		}
		if c == nil {
			if job.Status != lifecycle.JobRetryBackoff || job.NextAttemptAt == nil {
				tb.Fatalf("jobqueuetest: job %s is %s and no claim picks it up", job.JobID, job.Status)
			}
			clk.Advance(job.NextAttemptAt.Sub(clk.Now()))
			continue
		}
		if job, err = d.run(tb, c, h); err != nil {
			tb.Fatalf("jobqueuetest: job %s: %v", job.JobID, err)
		}
	}
	if job.ArtifactID == "" {
		return job, nil
	}
	cid := job.ProjectID
	if cid == "" {
		cid = cfg.Project
	}
	if cid == "" {
		cid = jobqueue.DefaultProject
	}
	art, err := q.Artifacts().GetForJob(ctx, lifecycle.ActorAdmin, cid, job.JobID)
	if err != nil {
		tb.Fatalf("jobqueuetest: artifact of job %s: %v", job.JobID, err)
	}
	return job, &art
}

// Hang waits until ctx is done and returns ctx.Err(). In a handler run by
// Run it also tells Run that the handler now waits for its deadline, so the
// fake clock moves to it: write a fake upstream that never answers as
// `return jobqueue.Output{}, jobqueuetest.Hang(ctx)`.
func Hang(ctx context.Context) error { return testdrive.Hang(ctx) }

// RequireJob fails the test unless q holds a job jobID in state want, and
// returns the job. It reads as the admin.
func RequireJob(tb testing.TB, q *jobqueue.Queue, jobID string, want lifecycle.JobState) lifecycle.Job {
	tb.Helper()
	j := get(tb, q, jobID)
	if j.Status != want {
		msg := fmt.Sprintf("jobqueuetest: job %s is %s, want %s (attempt %d of %d", jobID, j.Status, want, j.Attempt, j.MaxAttempts)
		if j.ErrorCode != "" {
			msg += ", error_code " + j.ErrorCode
		}
		if j.Error != nil {
			msg += ", error " + *j.Error
		}
		tb.Fatalf("%s)", msg)
	}
	return j
}

func get(tb testing.TB, q *jobqueue.Queue, jobID string) lifecycle.Job {
	tb.Helper()
	j, err := q.Get(context.Background(), lifecycle.ActorAdmin, jobID)
	if errors.Is(err, storage.ErrNotFound) {
		tb.Fatalf("jobqueuetest: no job %s", jobID)
	}
	if err != nil {
		tb.Fatalf("jobqueuetest: job %s: %v", jobID, err)
	}
	return j
}

type driver struct {
	clk *testdrive.Clock

	mu     sync.Mutex
	inCall bool // a handler call has not returned
	hung   bool // and it waits in Hang
}

// wrap makes h tell d when its calls start, hang and return.
func (d *driver) wrap(h jobqueue.Handler) jobqueue.Handler {
	switch hh := h.(type) {
	case nil:
		return nil
	case jobqueue.Handlers:
		return d.wrapNLM(hh)
	case *jobqueue.Handlers:
		if hh == nil {
			return nil
		}
		return d.wrapNLM(*hh)
	case jobqueue.HandlerFunc:
		if hh == nil {
			return nil
		}
	}
	return jobqueue.HandlerFunc(func(ctx context.Context, job lifecycle.Job) (jobqueue.Output, error) {
		defer d.returned()
		return h.Work(d.mark(ctx), job)
	})
}

// mark records that a handler call starts, and gives it a context whose
// Hang tells d it hangs.
func (d *driver) mark(ctx context.Context) context.Context {
	d.mu.Lock()
	d.inCall, d.hung = true, false
	d.mu.Unlock()
	return testdrive.WithHang(ctx, func() {
		d.mu.Lock()
		d.hung = true
		d.mu.Unlock()
	})
}

// wrapNLM is wrap for the NLM pipeline's two steps, kept two steps.
func (d *driver) wrapNLM(h jobqueue.Handlers) jobqueue.Handlers {
	mark := d.mark
	if f := h.AssembleContext; f != nil {
		h.AssembleContext = func(ctx context.Context, job lifecycle.Job) (json.RawMessage, error) {
			defer d.returned()
			return f(mark(ctx), job)
		}
	}
	if f := h.CallNotebookLM; f != nil {
		h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snapshot json.RawMessage) (jobqueue.Output, error) {
			defer d.returned()
			return f(mark(ctx), job, snapshot)
		}
	}
	return h
}

func (d *driver) returned() {
	d.mu.Lock()
	d.inCall = false
	d.mu.Unlock()
}

// run runs a claim, moving the clock whenever the claim is idle (a handler
// waits in Hang, the claim waits on a timer) to the next deadline it
// waits for.
func (d *driver) run(tb testing.TB, c *jobqueue.Claim, h jobqueue.Handler) (lifecycle.Job, error) {
	tb.Helper()
	type result struct {
		job lifecycle.Job
		err error
	}
	claimed := c.Job()
	res := make(chan result, 1)
	ended := make(chan struct{})
	// Started busy: the claim counts as working from here, not from when
	// its goroutine gets to run.
	ctx := clock.Start(context.Background(), d.clk)
	go func() {
		j, err := c.Run(ctx, h)
		res <- result{j, err}
		close(ended)
	}()
	failed := ""
	d.clk.Drive(stall, func() bool { return false }, ended, func(idle bool) string {
		d.mu.Lock()
		inCall, hung := d.inCall, d.hung
		d.mu.Unlock()
		switch {
		case idle:
			return fmt.Sprintf("attempt %d of job %s waits for nothing that can happen", claimed.Attempt, claimed.JobID)
		case !inCall || hung:
			return "" // the queue's own work: slow, not stuck
		}
		return fmt.Sprintf("attempt %d of job %s has not ended after %v of real time: a handler that should hang in a test must wait with jobqueuetest.Hang(ctx) so the fake clock can move to its deadline",
			claimed.Attempt, claimed.JobID, stall)
	}, func(msg string) {
		if msg == "" {
			msg = fmt.Sprintf("attempt %d of job %s: nothing happened for %v of real time", claimed.Attempt, claimed.JobID, stall)
		}
		failed = msg
	})
	if failed != "" {
		tb.Fatalf("jobqueuetest: %s", failed)
	}
	r := <-res
	return r.job, r.err
}
