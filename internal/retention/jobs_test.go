package retention_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// TestQueueAfterItsJobsAreDeleted runs real jobs through the Queue, lets
// the janitor delete the COMPLETE ones past their age (their agent's lock
// still names the last), and checks the queue goes on: a sweep, then a new
// job of the same agent claimed and completed. Artifacts are kept by
// default; with an age they go too.
func TestQueueAfterItsJobsAreDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	q, err := jobqueue.New(jobqueue.Config{Store: s, Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h := jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"t","body":"b","entity_map":{},"word_count":1}`)}, nil
	}}
	complete := func(id string) lifecycle.Job {
		t.Helper()
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: id, RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a"}); err != nil {
			t.Fatal(err)
		}
		c, err := q.Claim(ctx, "worker-1")
		if err != nil {
			t.Fatal(err)
		}
		j, err := c.Run(ctx, h)
		if err != nil || j.Status != lifecycle.JobComplete {
			t.Fatalf("%s: %s, %v", id, j.Status, err)
		}
		return j
	}
	var done []lifecycle.Job
	for i := range 3 {
		done = append(done, complete(fmt.Sprintf("job-%d", i)))
	}
	clk.Advance(age + time.Hour)
	j := newJanitor(t, retention.Config{Store: s, Owner: "p1", Clock: clk, Age: age})
	r, _, err := j.Pass(ctx)
	if err != nil || r.Deleted[retention.Jobs] != 3 {
		t.Fatalf("pass: %+v, %v", r, err)
	}
	for _, d := range done {
		if _, err := q.Get(ctx, lifecycle.ActorAdmin, d.JobID); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("%s: %v, want not found", d.JobID, err)
		}
	}
	if n := count(t, s, "projects/"); n != 3 {
		t.Errorf("%d artifacts left, want the 3 (kept by default)", n)
	}
	if _, err := q.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	complete("job-new")

	clk.Advance(age + time.Hour)
	j = newJanitor(t, retention.Config{Store: s, Owner: "p1", Clock: clk, Age: age, Ages: map[retention.Kind]time.Duration{retention.Artifacts: age}})
	if r, _, err = j.Pass(ctx); err != nil || r.Deleted[retention.Jobs] != 1 || r.Deleted[retention.Artifacts] != 4 {
		t.Fatalf("second pass: %+v, %v", r, err)
	}
	if n := count(t, s, "projects/"); n != 0 {
		t.Errorf("%d artifacts left", n)
	}
	// Through the artifact store's admin cleanup: each deletion audited.
	deletes := 0
	for k, err := range s.List(ctx, "audit/") {
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"artifact.delete"`) {
			deletes++
		}
	}
	if deletes != 4 {
		t.Errorf("%d artifact.delete audit events, want 4", deletes)
	}
}

func count(t *testing.T, s *storage.Store, prefix string) int {
	t.Helper()
	n := 0
	for _, err := range s.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}
