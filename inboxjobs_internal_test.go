package conveyor

import (
	"context"
	"strings"
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
