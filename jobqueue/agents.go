package jobqueue

import (
	"container/heap"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/storage"
)

// agentState is what a Queue knows of one agent: the head of its ready
// lane as last listed, what it last saw of the agent's lock, and when the
// agent is next worth a look.
type agentState struct {
	name string

	mu sync.Mutex // guards the lane and lock fields below
	// lockExists: the agent's lock object is known to exist.
	lockExists bool
	// keys are lane keys listed (or written by this Queue) and not yet tried.
	keys []string
	// complete: keys held the whole lane when listed (fewer than laneBatch).
	complete bool
	// covered: the last whole-queue listing (refreshLanes) included the lane.
	covered   bool
	listedAt  time.Time // when the lane was last listed
	gone      []goneKey // lane keys this Queue's claims deleted last (deleteLane)
	idle      int       // empty listings in a row
	busyUntil time.Time // the agent's lock was held; do not read it before
	lockAt    time.Time // when the agent's lock was last read for an orphan
	// freed is the lock as this Queue last freed it, or as its last claim
	// left it held when the claim ended (issue 12: no release write; see
	// Claim.end), at version freedVer: the next claim takes it by
	// compare-and-swap without reading it first.
	freed    *agentLock
	freedVer storage.Version

	// The schedule's fields, guarded by Queue.schedMu.
	due    time.Time
	index  int       // position in Queue.due; -1 while out of it
	trying bool      // a Claim is looking at the agent
	again  time.Time // the earliest due asked for while trying (zero: none)
}

// agent returns the state of agent, creating it (and putting it in the
// schedule, due now) on first sight.
func (q *Queue) agent(name string) *agentState {
	q.mu.Lock()
	a := q.agents[name]
	created := a == nil
	if created {
		a = &agentState{name: name, index: -1}
		q.agents[name] = a
	}
	q.mu.Unlock()
	if created {
		q.schedule(a, time.Time{}) // zero: due at once
	}
	return a
}

// dueHeap orders agents by when each is next worth a look, so a Claim
// costs O(log agents) CPU however many agents are idle or busy.
type dueHeap []*agentState

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	a := x.(*agentState)
	a.index = len(*h)
	*h = append(*h, a)
}
func (h *dueHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	a.index = -1
	return a
}

// schedule asks for a look at a no later than at. An agent a Claim is
// trying keeps the request until the Claim puts it back.
func (q *Queue) schedule(a *agentState, at time.Time) {
	q.schedMu.Lock()
	defer q.schedMu.Unlock()
	switch {
	case a.trying:
		if a.again.IsZero() || at.Before(a.again) {
			a.again = at
		}
		return
	case a.index < 0:
		a.due = at
		heap.Push(&q.due, a)
	case at.Before(a.due):
		a.due = at
		heap.Fix(&q.due, a.index)
	default:
		return
	}
	if a.index == 0 {
		q.wakeWaiters()
	}
}

// take removes and returns the agent due first if it is due at now.
func (q *Queue) take(now time.Time) *agentState {
	q.schedMu.Lock()
	defer q.schedMu.Unlock()
	if len(q.due) == 0 || q.due[0].due.After(now) {
		return nil
	}
	a := heap.Pop(&q.due).(*agentState)
	a.trying = true
	return a
}

// putBack returns an agent a Claim took to the schedule, due at next or at
// what was asked for meanwhile, whichever is sooner.
func (q *Queue) putBack(a *agentState, next time.Time) {
	q.schedMu.Lock()
	a.trying = false
	if !a.again.IsZero() && a.again.Before(next) {
		next = a.again
	}
	a.again = time.Time{}
	q.schedMu.Unlock()
	q.schedule(a, next)
}

// nextDue returns when the first agent is due (zero: none is known), and
// a channel closed when an agent becomes due sooner than that.
func (q *Queue) nextDue() (time.Time, <-chan struct{}) {
	q.schedMu.Lock()
	defer q.schedMu.Unlock()
	if q.wake == nil {
		q.wake = make(chan struct{})
	}
	if len(q.due) == 0 {
		return time.Time{}, q.wake
	}
	return q.due[0].due, q.wake
}

// wakeWaiters closes the channel nextDue handed out, if it handed one out.
// schedMu must be held.
func (q *Queue) wakeWaiters() {
	if q.wake != nil {
		close(q.wake)
		q.wake = nil
	}
}
