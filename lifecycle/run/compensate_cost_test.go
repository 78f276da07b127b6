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

// TestCompensationStoreRoundTrips measures what a cancel at a gate after
// two steps costs the store, from the cancel to the run's end, with and
// without compensations: the compensating agent pays the claim, one list
// and a read per step file and the input, and a status write with its
// audit event per compensation; the agent without pays what it paid
// before this feature (the cancel's status write, its audit event and the
// status index move).
func TestCompensationStoreRoundTrips(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		undo bool
		want [3]int64 // puts, deletes, lists (gets include the test's own status reads)
	}{
		{"without compensations", false, [3]int64{3, 2, 0}},
		{"two compensations", true, [3]int64{15, 3, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			counting := &teststores.Counting{Store: memStore(t)}
			g := newRig(t, storage.New(counting))
			u := &undoLog{}
			steps := []run.Step{okStep("reserve"), okStep("charge"), okStep("ship")}
			if tt.undo {
				steps[0], steps[1] = undoable("reserve", u, nil), undoable("charge", u, nil)
			}
			steps[1].Run = func(context.Context, run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Await: &run.Await{Approval: "ship"}}, nil
			}
			r, _ := g.runner("a", nil, run.Agent{Slug: "shop", Machine: lifecycle.MachineApproval, Steps: steps})
			id := submit(t, r, "shop")
			if st := g.wait(r, id, time.Second, time.Hour); st.Status != "awaiting_approval" {
				t.Fatalf("not parked: %+v", st)
			}
			g.idle()
			counting.Reset()
			if _, err := r.Cancel(context.Background(), id, lifecycle.ActorGateway, run.CancelRequest{}); err != nil {
				t.Fatal(err)
			}
			st := g.waitFor(r, id, 0, 0, func(st lifecycle.RunStatus) bool { return st.Status == "cancelled" })
			until(t, "the active entry to go", func() bool { return counting.Deletes.Load() >= tt.want[1] })
			g.idle()
			got := [3]int64{counting.Puts.Load(), counting.Deletes.Load(), counting.Lists.Load()}
			t.Logf("%s: puts, deletes, lists = %v, gets %d with the test's reads (log %d)", tt.name, got, counting.Gets.Load(), len(st.CompensationLog))
			if got != tt.want {
				t.Errorf("puts, deletes, lists = %v, want %v", got, tt.want)
			}
		})
	}
}
