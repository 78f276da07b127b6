package jobqueue_test

import (
	"context"
	"fmt"
	"iter"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// laneListings is memstore's driver counting the listings of every lane
// at once (queue/lanes/ from its start), with its Watch and Commit.
type laneListings struct {
	driver.Store
	whole atomic.Int64
}

func (c *laneListings) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	if prefix == layout.LanesPrefix && after == "" {
		c.whole.Add(1)
	}
	return c.Store.ListAfter(ctx, prefix, after)
}

func (c *laneListings) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return c.Store.(driver.Watcher).Watch(ctx, prefix)
}

func (c *laneListings) Commit(ctx context.Context, ws []driver.Write) ([]driver.Version, error) {
	return c.Store.(driver.Committer).Commit(ctx, ws)
}

// TestOwnLaneWritesNoRelist: a Worker's Queue applies its own enqueues
// and pickups to its lane cache, so they do not wake its watch into
// listing every lane; another Queue's enqueues on the same Store (as
// another process's) still do, each found at its signal. Jobs come 50 ms
// apart on a fake clock: past the signal's pace (10 ms), short of the
// unprompted one (200 ms, about one listing in four jobs).
func TestOwnLaneWritesNoRelist(t *testing.T) {
	const jobs = 20
	for _, tc := range []struct {
		name    string
		other   bool
		ok      func(listed int64) bool
		wantMsg string
	}{
		{"own", false, func(n int64) bool { return n <= jobs/2 }, fmt.Sprintf("at most %d", jobs/2)},
		{"another Queue", true, func(n int64) bool { return n >= jobs*3/4 }, fmt.Sprintf("at least %d", jobs*3/4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			ls := &laneListings{Store: memstore.NewDriver()}
			q := newQueue(t, storage.New(ls), clk)
			from := q
			if tc.other {
				from = newQueue(t, storage.New(ls), clk)
			}
			startWorker(t, &jobqueue.Worker{Queue: q, ID: "w1", Handlers: okHandlers(), PollInterval: time.Hour, SweepInterval: -1})
			<-clk.WaitForTimers(2) // the loop's and the callback sender's
			base := ls.whole.Load()
			// A signal that lands while the Worker is between a listing
			// and its wait may find nothing new to list (a race the
			// unprompted recheck covers, on a clock this test holds): a
			// job still waiting after a second of wall time gets the
			// recheck's 200 ms, and at most two jobs may need it, or the
			// signals are not doing the work.
			nudged := 0
			for i := range jobs {
				clk.Advance(50 * time.Millisecond)
				id := fmt.Sprintf("job-%d", i)
				enqueue(t, from, id, fmt.Sprintf("agent-%d", i%3))
				last := time.Now()
				waitFor(t, func() bool {
					if get(t, from, id).Status == lifecycle.JobComplete {
						return true
					}
					if time.Since(last) > time.Second {
						clk.Advance(200 * time.Millisecond)
						last, nudged = time.Now(), nudged+1
					}
					return false
				})
				<-clk.WaitForTimers(2) // the loop's and the callback sender's
			}
			n := ls.whole.Load() - base
			t.Logf("listed %d (%d jobs nudged)", n, nudged)
			if nudged > 2 {
				t.Fatalf("%d of %d jobs waited for the recheck, not a signal", nudged, jobs)
			}
			if !tc.ok(n) {
				t.Fatalf("%d listings of every lane for %d jobs, want %s", n, jobs, tc.wantMsg)
			}
		})
	}
}
