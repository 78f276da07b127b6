package retention_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// TestRollupsAreRetained: the job queue's rollups, made by its counts over
// 100 days of jobs, are deleted past their default ages once retention is
// on (hours 2 days, days 90), the latest day and the hours since kept, and
// the counts answer the same afterwards; with retention off nothing goes.
func TestRollupsAreRetained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	q, err := jobqueue.New(jobqueue.Config{Store: s, Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	op := jobqueue.Operator{Queue: q}
	h := jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"t","body":"b","entity_map":{},"word_count":1}`)}, nil
	}}
	for i := range 100 {
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("job-%03d", i), RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a"}); err != nil {
			t.Fatal(err)
		}
		c, err := q.Claim(ctx, "worker-1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Run(ctx, h); err != nil {
			t.Fatal(err)
		}
		clk.Advance(24 * time.Hour)
		if _, err := op.Counts(ctx, lifecycle.ActorAdmin); err != nil { // makes the rollups
			t.Fatal(err)
		}
	}
	before, err := op.Counts(ctx, lifecycle.ActorAdmin)
	if err != nil || before.Total[lifecycle.JobComplete] != 100 {
		t.Fatalf("counts: %+v, %v", before.Total, err)
	}
	hours, days := count(t, s, "stats/jobs/hours/"), count(t, s, "stats/jobs/days/")
	if hours < 99*24 || days < 99 {
		t.Fatalf("%d hour and %d day records after 100 days; want every hour and day", hours, days)
	}

	off := newJanitor(t, retention.Config{Store: s, Owner: "p1", Clock: clk, Ages: map[retention.Kind]time.Duration{retention.Runs: retention.Forever}})
	if r, _, err := off.Pass(ctx); err != nil || r.Deleted[retention.StatsHours]+r.Deleted[retention.StatsDays] != 0 {
		t.Fatalf("retention off: %+v, %v; want no rollup deleted", r, err)
	}

	on := newJanitor(t, retention.Config{Store: s, Owner: "p1", Clock: clk, Age: age})
	r, _, err := on.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Hours: those of the last 2 days stay (48, and the hours since the
	// last closed day's end); days: the last 90.
	if left := count(t, s, "stats/jobs/hours/"); left > 48 || left < 40 {
		t.Errorf("%d hour records left of %d; want the last 2 days' (deleted %d)", left, hours, r.Deleted[retention.StatsHours])
	}
	if left := count(t, s, "stats/jobs/days/"); left != 90 {
		t.Errorf("%d day records left of %d; want 90 (deleted %d)", left, days, r.Deleted[retention.StatsDays])
	}
	after, err := op.Counts(ctx, lifecycle.ActorAdmin)
	if err != nil || after.Partial || after.Total[lifecycle.JobComplete] != 100 {
		t.Fatalf("counts after the pass: %+v partial %v, %v; want the same 100 COMPLETE", after.Total, after.Partial, err)
	}
}
