package jobqueue

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

// peakRunning runs n goroutines that each start a claim of lane through
// start, hold it a moment and end it, and returns the most that ran at
// once.
func peakRunning(c *caps, lane string, n int, start func(*agentState) bool) int64 {
	var now, peak atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			a := &agentState{name: lane}
			for range 50 {
				if !start(a) {
					runtime.Gosched()
					continue
				}
				cur := now.Add(1)
				for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
				}
				runtime.Gosched()
				now.Add(-1)
				c.ended(a, time.Time{})
			}
		})
	}
	wg.Wait()
	return peak.Load()
}

// TestTryStartNeverPassesTheCap: N goroutines starting claims of a type
// capped at 2 in this process never run more than 2 at once; a check and
// a count taken apart (as admit then started were) do, which shows the
// checker can fail.
func TestTryStartNeverPassesTheCap(t *testing.T) {
	t.Parallel()
	const typ lifecycle.JobType = "CAPPED"
	newCaps := func() *caps {
		return &caps{types: map[lifecycle.JobType]TypeConfig{typ: {MaxRunning: 2}}, sched: newScheduler(),
			running: map[string]int{}, waiting: map[string]map[*agentState]bool{}}
	}
	lane := typeLane(typ, "")
	c := newCaps()
	if peak := peakRunning(c, lane, 64, c.tryStart); peak > 2 {
		t.Fatalf("tryStart: %d claims ran at once under a cap of 2", peak)
	}
	if got := c.running["t:"+string(typ)]; got != 0 {
		t.Fatalf("after every claim ended the type counts %d running", got)
	}
	// The racy shape: check under the lock, let others run, count.
	apart := newCaps()
	checkThenCount := func(a *agentState) bool {
		k := apart.capKeys(a.name)[1]
		apart.mu.Lock()
		full := apart.running[k.key] >= k.limit
		apart.mu.Unlock()
		if full {
			return false
		}
		time.Sleep(time.Microsecond)
		apart.mu.Lock()
		for _, k := range apart.capKeys(a.name) {
			apart.running[k.key]++
		}
		apart.mu.Unlock()
		return true
	}
	if peak := peakRunning(apart, lane, 64, checkThenCount); peak <= 2 {
		t.Fatalf("a check apart from its count ran at most %d at once: the checker cannot see the race", peak)
	}
}
