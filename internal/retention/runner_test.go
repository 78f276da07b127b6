package retention_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestRunnerHistoryIsDeletedWhole runs real runs through the Runner (with
// an idempotency key, so with its record, and the audit events of every
// write), then a janitor whose clock is past every age: nothing of the
// runs is left, but the agent's slots and the janitor's lease, which are
// no history.
func TestRunnerHistoryIsDeletedWhole(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	s := memstore.New()
	step := func(context.Context, run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "done", Proposals: []string{"prop_1"}}, nil
	}
	r, err := run.NewRunner(run.Config{Store: s, Logger: quiet},
		run.Agent{Slug: "alpha", Steps: []run.Step{{Name: "one", Run: step}, {Name: "two", Run: step}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	var ids []string
	for _, key := range []string{"api:c:1", ""} {
		res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "alpha", IdempotencyKey: key, RepoID: "octo/repo"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Wait(ctx, res.RunID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.RunID)
	}
	stop()
	<-done

	before, _ := size(t, s)
	clk := clock.NewFake(time.Now().Add(age + 48*time.Hour))
	rep, _, err := newJanitor(t, retention.Config{Store: s, Owner: "p1", Clock: clk, Age: age}).Pass(context.Background())
	if err != nil || rep.Deleted[retention.Runs] != 2 || rep.Deleted[retention.Idempotency] != 1 || rep.Deleted[retention.Audit] == 0 {
		t.Fatalf("pass: %+v, %v", rep, err)
	}
	var left []string
	for k, err := range s.List(context.Background(), "") {
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
		for _, id := range ids {
			if strings.Contains(k, id) {
				t.Errorf("%s of run %s left", k, id)
			}
		}
		if strings.HasPrefix(k, "audit/") || strings.HasPrefix(k, "idempotency/") || strings.HasPrefix(k, "index/") {
			t.Errorf("%s left", k)
		}
	}
	t.Logf("%d keys before, left: %v", before, left)
}
