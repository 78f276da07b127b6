package conveyortest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// QueueOption changes the jobqueue.Config RunJob builds the Queue from,
// e.g. its StepTimeout, MaxAttempts, Backoff or Types. RunJob then sets
// Store (a memstore) and Clock (its fake clock), and a LeaseTTL long enough
// that heartbeats stay out of the test's way; Logger defaults to
// discarding.
type QueueOption func(*jobqueue.Config)

// RunJob enqueues n (as the gateway) in a fresh Queue, runs it with h (a
// jobqueue.Handler: HandlerFunc, Typed, or the NLM pipeline's Handlers) until it
// is COMPLETE, DEAD or CANCELLED, and returns the job as last written and its artifact
// (nil when it has none). A job enqueued to run later, waiting out a
// retry's backoff, or snoozed by its handler (jobqueue.Snooze), is run
// when the fake clock, moved on, reaches its time.
// A job of a type of the user's runs with h as its Handler: registered
// for it unless a QueueOption's Config.Types gives it one.
// The test fails when the job is refused or cannot be run to its end.
func RunJob(tb testing.TB, h jobqueue.Handler, n jobqueue.NewJob, opts ...QueueOption) (lifecycle.Job, *artifact.Artifact) {
	tb.Helper()
	clk := newClock()
	d := &jobDriver{clk: clk}
	var cfg jobqueue.Config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.Store = memstore.New()
	cfg.Clock = clk
	cfg.LeaseTTL = far
	if cfg.Logger == nil {
		cfg.Logger = discard()
	}
	h = d.wrap(h)
	types := make(map[lifecycle.JobType]jobqueue.TypeConfig, len(cfg.Types)+1)
	for name, tc := range cfg.Types {
		tc.Handler = d.wrap(tc.Handler)
		types[name] = tc
	}
	if _, builtin := artifact.TypeForJob(n.JobType); !builtin && types[n.JobType].Handler == nil {
		// A type of the user's that the options did not register: h is its
		// Handler, so a handler test needs no Config.
		tc := types[n.JobType]
		tc.Handler = h
		types[n.JobType] = tc
	}
	if len(types) > 0 {
		cfg.Types = types
	}
	q, err := jobqueue.New(cfg)
	if err != nil {
		tb.Fatalf(name+": %v", err)
	}
	ctx := context.Background()
	job, err := q.Enqueue(ctx, lifecycle.ActorGateway, n)
	if err != nil {
		tb.Fatalf(name+": enqueue: %v", err)
	}
	for {
		job = get(tb, q, job.JobID)
		if job.Status == lifecycle.JobComplete || job.Status == lifecycle.JobDead || job.Status == lifecycle.JobCancelled {
			break
		}
		c, err := q.Claim(ctx, name)
		if err != nil {
			tb.Fatalf(name+": claim: %v", err)
		}
		if c == nil {
			// Not ready yet: a retry's backoff, a job enqueued to run
			// later (NewJob.RunAt, Delay) or snoozed, passes on the fake clock.
			due := job.NextAttemptAt
			if job.Status == lifecycle.JobQueued {
				due = job.ScheduledAt
			}
			if due == nil {
				tb.Fatalf(name+": job %s is %s and no claim picks it up", job.JobID, job.Status)
			}
			clk.Advance(due.Sub(clk.Now()))
			continue
		}
		if job, err = d.run(tb, c, h); err != nil {
			tb.Fatalf(name+": job %s: %v", job.JobID, err)
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
		cid = lifecycle.DefaultProject
	}
	art, err := q.Artifacts().GetForJob(ctx, lifecycle.ActorAdmin, cid, job.JobID)
	if err != nil {
		tb.Fatalf(name+": artifact of job %s: %v", job.JobID, err)
	}
	return job, &art
}

// RequireJob fails the test unless q holds a job jobID in state want, and
// returns the job. It reads as the admin.
func RequireJob(tb testing.TB, q *jobqueue.Queue, jobID string, want lifecycle.JobState) lifecycle.Job {
	tb.Helper()
	j := get(tb, q, jobID)
	if j.Status != want {
		msg := fmt.Sprintf(name+": job %s is %s, want %s (attempt %d of %d", jobID, j.Status, want, j.Attempt, j.MaxAttempts)
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
		tb.Fatalf(name+": no job %s", jobID)
	}
	if err != nil {
		tb.Fatalf(name+": job %s: %v", jobID, err)
	}
	return j
}

type jobDriver struct {
	clk *fakeClock

	mu     sync.Mutex
	inCall bool // a handler call has not returned
	hung   bool // and it waits in Hang
}

// wrap makes h tell d when its calls start, hang and return.
func (d *jobDriver) wrap(h jobqueue.Handler) jobqueue.Handler {
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
	return jobqueue.HandlerFunc(func(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error) {
		defer d.returned()
		return h.Work(d.mark(ctx), job)
	})
}

// mark records that a handler call starts, and gives it a context whose
// Hang tells d it hangs.
func (d *jobDriver) mark(ctx context.Context) context.Context {
	d.mu.Lock()
	d.inCall, d.hung = true, false
	d.mu.Unlock()
	return withHang(ctx, func() {
		d.mu.Lock()
		d.hung = true
		d.mu.Unlock()
	})
}

// wrapNLM is wrap for the NLM pipeline's two steps, kept two steps.
func (d *jobDriver) wrapNLM(h jobqueue.Handlers) jobqueue.Handlers {
	mark := d.mark
	if f := h.AssembleContext; f != nil {
		h.AssembleContext = func(ctx context.Context, job lifecycle.Job) (json.RawMessage, error) {
			defer d.returned()
			return f(mark(ctx), job)
		}
	}
	if f := h.CallNotebookLM; f != nil {
		h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snapshot json.RawMessage) (lifecycle.JobOutput, error) {
			defer d.returned()
			return f(mark(ctx), job, snapshot)
		}
	}
	return h
}

func (d *jobDriver) returned() {
	d.mu.Lock()
	d.inCall = false
	d.mu.Unlock()
}

// run runs a claim, moving the clock whenever the claim is idle (a handler
// waits in Hang, the claim waits on a timer) to the next deadline it
// waits for.
func (d *jobDriver) run(tb testing.TB, c *jobqueue.Claim, h jobqueue.Handler) (lifecycle.Job, error) {
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
	ctx := activity.Start(context.Background(), d.clk)
	go func() {
		j, err := c.Run(ctx, h)
		res <- result{j, err}
		close(ended)
	}()
	failed := ""
	d.clk.drive(stall, func() bool { return false }, ended, func(idle bool) string {
		d.mu.Lock()
		inCall, hung := d.inCall, d.hung
		d.mu.Unlock()
		switch {
		case idle:
			return fmt.Sprintf("attempt %d of job %s waits for nothing that can happen", claimed.Attempt, claimed.JobID)
		case !inCall || hung:
			return "" // the queue's own work: slow, not stuck
		}
		return fmt.Sprintf("attempt %d of job %s has not ended after %v of real time: a handler that should hang in a test must wait with conveyortest.Hang(ctx) so the fake clock can move to its deadline",
			claimed.Attempt, claimed.JobID, stall)
	}, func(msg string) {
		if msg == "" {
			msg = fmt.Sprintf("attempt %d of job %s: nothing happened for %v of real time", claimed.Attempt, claimed.JobID, stall)
		}
		failed = msg
	})
	if failed != "" {
		tb.Fatalf(name+": %s", failed)
	}
	r := <-res
	return r.job, r.err
}
