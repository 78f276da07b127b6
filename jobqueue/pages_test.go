package jobqueue_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// TestListPage: pages cover every job once; a filter that matches one job
// in 600 reads at most the page's budget per request, answering short
// pages with a next cursor; a bad query is refused with its code.
func TestListPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counting := &teststores.Counting{Store: memstore.New()}
	q, err := jobqueue.New(jobqueue.Config{Store: storage.New(counting)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		agent := "bulk"
		if i == 599 {
			agent = "rare"
		}
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("job-%04d", i), RunID: "run-1",
			JobType: lifecycle.JobBrief, AgentSlug: agent}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(jq jobqueue.JobQuery) (n, pages int, maxGets int64) {
		for pages = 1; ; pages++ {
			counting.Reset()
			p, err := q.ListPage(ctx, lifecycle.ActorGateway, jq)
			if err != nil {
				t.Fatal(err)
			}
			maxGets = max(maxGets, counting.Gets.Load())
			n += len(p.Jobs)
			if p.Next == "" {
				return n, pages, maxGets
			}
			jq.Cursor = p.Next
		}
	}
	if n, pages, _ := read(jobqueue.JobQuery{Limit: 250}); n != 600 || pages != 3 {
		t.Fatalf("%d jobs in %d pages, want 600 in 3", n, pages)
	}
	if n, pages, gets := read(jobqueue.JobQuery{Agent: "rare", Limit: 10}); n != 1 || pages != 3 || gets > 200 {
		t.Fatalf("the rare job: %d in %d pages, at most %d reads a page; want 1 in 3, at most 200", n, pages, gets)
	}
	for _, tt := range []struct {
		jq   jobqueue.JobQuery
		code string
	}{
		{jobqueue.JobQuery{Status: "NAPPING"}, codes.InvalidRequest},
		{jobqueue.JobQuery{Limit: 501}, codes.InvalidRequest},
		{jobqueue.JobQuery{Cursor: "bm90IGEgam9i"}, codes.InvalidCursor},
	} {
		if _, err := q.ListPage(ctx, lifecycle.ActorGateway, tt.jq); lifecycle.ErrorCode(err) != tt.code {
			t.Errorf("%+v: %v, want %s", tt.jq, err, tt.code)
		}
	}
	if _, err := q.ListPage(ctx, lifecycle.ActorNLMBackend, jobqueue.JobQuery{}); lifecycle.ErrorCode(err) != codes.Forbidden {
		t.Errorf("the NLM backend lists jobs: %v", err)
	}
}
