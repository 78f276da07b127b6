package inbox_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// jobs is a Dispatch that records what it was offered and fails while
// down is set.
type jobs struct {
	mu      sync.Mutex
	down    bool
	offered []string
}

func (j *jobs) dispatch(_ context.Context, e lifecycle.InboxEntry) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.offered = append(j.offered, e.ID)
	if j.down {
		return "", errors.New("the job store is down")
	}
	if e.Intent.Action != "propose-edit" {
		return "", nil
	}
	return "job-of-" + e.ID, nil
}

// An accepted entry is offered to Dispatch and records the job it answers;
// a failed dispatch leaves the entry pending without a job, Submit still
// succeeding, and DispatchPending retries it once: an entry linked is not
// offered again, nor one whose action starts no job linked.
func TestDispatchLinksTheEntryAndRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := &jobs{}
	b, err := inbox.New(inbox.Config{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler), Dispatch: j.dispatch})
	if err != nil {
		t.Fatal(err)
	}
	e, err := b.Submit(ctx, lifecycle.ActorGateway, sub("e1"))
	if err != nil || e.JobID != "job-of-e1" {
		t.Fatalf("Submit = %+v, %v; want job job-of-e1", e, err)
	}
	if got, _ := b.Get(ctx, "e1"); got.JobID != "job-of-e1" {
		t.Fatalf("stored entry names job %q", got.JobID)
	}

	j.down = true
	e, err = b.Submit(ctx, lifecycle.ActorGateway, sub("e2"))
	if err != nil || e.JobID != "" || e.Status != lifecycle.InboxPending {
		t.Fatalf("Submit with the jobs down = %+v, %v; want pending without a job", e, err)
	}
	if _, err := b.DispatchPending(ctx); err == nil {
		t.Fatal("DispatchPending with the jobs down: no error")
	}
	j.down = false
	other := sub("e3")
	other.Intent.Action = "summarize"
	if _, err := b.Submit(ctx, lifecycle.ActorGateway, other); err != nil {
		t.Fatal(err)
	}
	linked, err := b.DispatchPending(ctx)
	if err != nil || len(linked) != 1 || linked[0] != "e2" {
		t.Fatalf("DispatchPending = %v, %v; want [e2]", linked, err)
	}
	if got, _ := b.Get(ctx, "e2"); got.JobID != "job-of-e2" {
		t.Fatalf("e2 names job %q after the retry", got.JobID)
	}
	j.offered = nil
	if linked, err := b.DispatchPending(ctx); err != nil || len(linked) != 0 {
		t.Fatalf("second DispatchPending = %v, %v; want nothing linked", linked, err)
	}
	// Only e3 is offered again: its action starts no job, so it names none.
	if len(j.offered) != 1 || j.offered[0] != "e3" {
		t.Fatalf("offered again: %v, want [e3]", j.offered)
	}
}

// The expiry pass retries a failed dispatch in its own listing: the entry
// not due is linked, the one due is expired and offered nothing, and an
// entry linked already is not offered again.
func TestExpireDueRetriesDispatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := &jobs{down: true}
	clk := clock.NewFake(time.Date(2026, 2, 14, 9, 0, 0, 0, time.UTC))
	b, err := inbox.New(inbox.Config{Store: memstore.New(), Clock: clk, Logger: slog.New(slog.DiscardHandler), Dispatch: j.dispatch})
	if err != nil {
		t.Fatal(err)
	}
	short := sub("due")
	short.Metadata.TTLHours = 1
	for _, s := range []lifecycle.InboxSubmission{short, sub("later")} {
		if e, err := b.Submit(ctx, lifecycle.ActorGateway, s); err != nil || e.JobID != "" {
			t.Fatalf("Submit %s with the jobs down = %+v, %v", s.ID, e, err)
		}
	}
	j.down, j.offered = false, nil
	clk.Advance(2 * time.Hour)
	moved, err := b.ExpireDue(ctx, lifecycle.ActorSystem)
	if err != nil || len(moved) != 1 || moved[0] != "due" {
		t.Fatalf("ExpireDue = %v, %v; want [due]", moved, err)
	}
	if got, _ := b.Get(ctx, "later"); got.JobID != "job-of-later" {
		t.Fatalf("later names job %q after the expiry pass", got.JobID)
	}
	if len(j.offered) != 1 || j.offered[0] != "later" {
		t.Fatalf("offered %v, want [later]", j.offered)
	}
	j.offered = nil
	if _, err := b.ExpireDue(ctx, lifecycle.ActorSystem); err != nil || len(j.offered) != 0 {
		t.Fatalf("second pass: %v, offered %v; want nothing offered", err, j.offered)
	}
}
