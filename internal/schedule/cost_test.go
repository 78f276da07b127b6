package schedule_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/storage"
)

// TestPeriodicJobCost: the store calls a periodic job's slot costs, by one
// process and by three, on a store that settles at once and on one that
// settles (no fault injected). One process: 2 reads and 4 writes (the
// claim, the job and its lane entry in one commit, the slot's advance);
// the care on a store that settles costs it one read (the queue's read of
// the id), and no write. Three: a process that loses the claim reads the
// state, and, on a store that settles, the job once, as many as the race
// makes lose it (logged).
func TestPeriodicJobCost(t *testing.T) {
	t.Parallel()
	const slots = 20
	type cost struct{ reads, writes float64 }
	per := map[string]cost{}
	for _, settles := range []bool{false, true} {
		for _, n := range []int{1, 3} {
			name := fmt.Sprintf("settles=%v/processes=%d", settles, n)
			g := newRig(t, nil)
			fs := faultstore.New(memstore.New())
			if settles {
				fs.SetSettle(settle, g.clock.Now)
			}
			count := &teststores.Counting{Store: fs}
			g.store = storage.New(count)
			var first *jobProc
			for i := range n {
				p := g.startJobs(digestEvery("costly", time.Minute))
				if i == 0 {
					first = p
				}
			}
			g.settle(g.clock, n)
			for range 10 { // the state is created (Settle apart on a store that settles)
				g.clock.Advance(time.Second)
				g.settle(g.clock, n)
			}
			g.clock.Advance(time.Minute)
			g.settle(g.clock, n)
			gets, puts, commits := count.Gets.Load(), count.Puts.Load(), count.Commits.Load()
			for range slots {
				g.clock.Advance(time.Minute)
				g.settle(g.clock, n)
			}
			if got := jobs(t, first.queue); len(got) != slots+1 {
				t.Fatalf("%s: %d jobs", name, len(got))
			}
			gs, ps := float64(count.Gets.Load()-gets)/slots, float64(count.Puts.Load()-puts)/slots
			cs := float64(count.Commits.Load()-commits) / slots
			per[name] = cost{gs, ps}
			t.Logf("%s: %.1f reads and %.1f writes (%.1f commits) a slot", name, gs, ps, cs)
		}
	}
	at, settling := per["settles=false/processes=1"], per["settles=true/processes=1"]
	// (One read in the 20 slots is no slot's: 2.05 a slot.)
	if math.Round(at.reads) != 2 || at.writes != 4 || math.Abs(settling.reads-at.reads-1) > 0.01 || settling.writes != 4 {
		t.Fatalf("one process: %+v a slot on a store that settles at once (want 2 reads, 4 writes), %+v on one that settles (want a read more)", at, settling)
	}
}
