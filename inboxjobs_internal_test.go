package conveyor

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// A dispatch made twice for one entry (a retry after the link was lost)
// answers the same job and enqueues it once; an entry id too long to
// prefix still gives a valid id, the same every time.
func TestInboxDispatchTwiceIsOneJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, err := jobqueue.New(jobqueue.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	dispatch, err := newInboxJobs(q, map[string]lifecycle.JobType{"propose-edit": lifecycle.JobBrief}, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", storekey.MaxIDLen)
	for _, id := range []string{"e1", long} {
		e := lifecycle.InboxEntry{ID: id, Intent: lifecycle.InboxIntent{Action: "propose-edit", Target: "t"}}
		first, err := dispatch(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		again, err := dispatch(ctx, e)
		if err != nil || again != first {
			t.Fatalf("second dispatch of %.10s = %q, %v; want %q", id, again, err, first)
		}
		if err := storekey.ValidateID("job id", first); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, err := range q.List(ctx, lifecycle.ActorOrchestration) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d jobs after two dispatches of two entries, want 2", n)
	}
}

// The enqueue of an entry's job fails (the queue refused it; then it
// wrote the job but the answer was lost): the entry is accepted, pending
// without a job, and the inbox pass of the Client (expiry, then the retry)
// links it to one job, never two.
func TestInboxJobRetriedByThePass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, lost := range []bool{false, true} {
		var fail atomic.Bool
		fail.Store(true)
		mw := func(next jobqueue.InsertFunc) jobqueue.InsertFunc {
			return func(ctx context.Context, jobs []jobqueue.NewJob) ([]lifecycle.Job, error) {
				if !fail.Load() {
					return next(ctx, jobs)
				}
				if lost {
					if _, err := next(ctx, jobs); err != nil {
						return nil, err
					}
				}
				return nil, errors.New("the store did not answer")
			}
		}
		c, err := New(Config{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler), InboxJobs: map[string]lifecycle.JobType{"propose-edit": lifecycle.JobBrief},
			Queue: jobqueue.Config{InsertMiddleware: []func(jobqueue.InsertFunc) jobqueue.InsertFunc{mw}}})
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Inbox().Submit(ctx, lifecycle.ActorGateway, lifecycle.InboxSubmission{ID: "e1",
			Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"}, Intent: lifecycle.InboxIntent{Action: "propose-edit", Target: "t"}})
		if err != nil || e.JobID != "" {
			t.Fatalf("lost %v: Submit = %+v, %v; want accepted without a job", lost, e, err)
		}
		fail.Store(false)
		pass := newInboxExpiry(c.Inbox(), 0, c.clock, c.log)
		for range 2 {
			if err := pass.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got, _ := c.Inbox().Get(ctx, "e1"); got.JobID != "inbox:e1" {
			t.Fatalf("lost %v: entry names job %q after the pass", lost, got.JobID)
		}
		n := 0
		for _, err := range c.Jobs().List(ctx, lifecycle.ActorOrchestration) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != 1 {
			t.Fatalf("lost %v: %d jobs, want 1", lost, n)
		}
	}
}
