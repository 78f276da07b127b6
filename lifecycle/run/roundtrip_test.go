package run_test

import (
	"context"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// finishSignal is a Metrics that reports each finished run on a channel.
type finishSignal struct {
	run.Metrics
	done chan string
}

func (f finishSignal) RunFinished(agent, status string, _ time.Duration) { f.done <- status }

// TestHappyPathStoreRoundTrips holds the target for a 3-step run:
// one status write per transition (6), one file per step (3), an audit event
// per status write (6), the manifest, the run and active index entries and
// the slot (taken and freed), a start marker per step that is not idempotent
// (3; see markStarted), the history indexes (the history entry, the first
// status entry, and a put and a delete for each of the 3 status changes),
// and not a single read or list.
func TestHappyPathStoreRoundTrips(t *testing.T) {
	t.Parallel()
	for name, newStore := range map[string]func(testing.TB) *storage.Store{"memstore": memStore, "minio": minioStore} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			counting := &teststores.Counting{Store: newStore(t)}
			g := newRig(t, storage.New(counting))
			done := make(chan string, 1)
			agent := run.Agent{Slug: "counted", Steps: []run.Step{okStep("a"), okStep("b"), okStep("c")}}
			r, _ := g.runner("a", func(c *run.Config) {
				c.Metrics = finishSignal{Metrics: noMetrics{}, done: done}
			}, agent)
			// Let the runner's start-up poll (one list) pass first.
			g.timers(1) // the start-up poll is over: the next poll is armed
			counting.Reset()
			if _, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: agent.Slug}); err != nil {
				t.Fatal(err)
			}
			if st := <-done; st != "completed" {
				t.Fatalf("run %s", st)
			}
			got := [4]int64{counting.Puts.Load(), counting.Deletes.Load(), counting.Gets.Load(), counting.Lists.Load()}
			// puts: 6 status + 6 audit + 3 steps + manifest + run index + active + slot taken + slot freed,
			// a start marker for each of the 3 steps, which are not idempotent,
			// and the history entry, the first status entry and 3 status moves;
			// deletes: the active entry and the 3 status entries left
			if want := [4]int64{28, 4, 0, 0}; got != want {
				t.Errorf("puts, deletes, gets, lists = %v, want %v", got, want)
			}
		})
	}
}

type noMetrics struct{}

func (noMetrics) RunTransition(string, string, string, string) {}
func (noMetrics) RunFinished(string, string, time.Duration)    {}
func (noMetrics) Idempotency(string, bool)                     {}
