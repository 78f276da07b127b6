package run_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// parkGate holds the write that frees a run's slot as it parks, until
// released: the window in which the runner still ends the run's execution.
type parkGate struct {
	driver.Store
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (g *parkGate) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	if strings.Contains(key, "/slots/") && strings.Contains(string(v), `"run_id":""`) {
		g.once.Do(func() {
			close(g.held)
			testWait(ctx, g.release)
		})
	}
	return g.Store.Put(ctx, key, v, c)
}

// An event delivered while the runner is still parking the run (between
// the status write that parks it and the end of its execution) is acted on
// when that execution ends, not left for the next poll. Before the fix the
// handed run was dropped as "executing" and waited PollInterval (here an
// hour of a clock that never moves): the run never resumed.
func TestDeliverWhileParkingResumesWithoutAPoll(t *testing.T) {
	t.Parallel()
	gate := &parkGate{Store: memstore.New(), held: make(chan struct{}), release: make(chan struct{})}
	g := newRig(t, storage.New(gate))
	agent := run.Agent{Slug: "ci-wait", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("wait-ci", &run.Await{ExternalEvent: "ci.finished", Timeout: time.Hour}), okStep("deploy")}}
	r, _ := g.runner("a", func(c *run.Config) { c.PollInterval = time.Hour }, agent)
	id := submit(t, r, agent.Slug)
	select {
	case <-gate.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the run never parked")
	}
	st, err := r.Deliver(context.Background(), id, lifecycle.ActorGateway, run.ExternalEvent{Type: "ci.finished", ID: "evt-1"})
	if err != nil || st.Status != "running" {
		t.Fatalf("Deliver while parking: %+v, %v", st, err)
	}
	close(gate.release)
	if st := g.wait(r, id, 0, 0); st.Status != "completed" {
		t.Fatalf("run after the event: %s", st.Status)
	}
}
