package run_test

import (
	"context"
	"testing"

	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// TestKeyedHappyPathStoreRoundTrips is TestHappyPathStoreRoundTrips for a
// submit with an idempotency key: the same run's writes, plus the key's
// record (created, then completed: a put and a read-modify-write) and its
// expiry entry, one create-only put (docs/design.md, Idempotency:
// "Expiry index"). An unkeyed submit writes no entry (the test above holds it).
func TestKeyedHappyPathStoreRoundTrips(t *testing.T) {
	t.Parallel()
	counting := &teststores.Counting{Store: memStore(t)}
	g := newRig(t, storage.New(counting))
	done := make(chan string, 1)
	agent := run.Agent{Slug: "counted", Steps: []run.Step{okStep("a"), okStep("b"), okStep("c")}}
	r, _ := g.runner("a", func(c *run.Config) {
		c.Metrics = finishSignal{Metrics: noMetrics{}, done: done}
	}, agent)
	g.timers(1)
	counting.Reset()
	if _, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: agent.Slug, IdempotencyKey: "api:client:1"}); err != nil {
		t.Fatal(err)
	}
	if st := <-done; st != "completed" {
		t.Fatalf("run %s", st)
	}
	got := [4]int64{counting.Puts.Load(), counting.Deletes.Load(), counting.Gets.Load(), counting.Lists.Load()}
	if want := [4]int64{31, 4, 1, 0}; got != want {
		t.Errorf("puts, deletes, gets, lists = %v, want %v", got, want)
	}
}
