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
	// lockSlot is the lane's first lock (the agent's lock, slot 0).
	lockSlot
	// slots are the lane's other locks this Queue used (slot k at k-1),
	// for a lane several jobs may run in at once (a type's): its jobs run
	// each under a lock of its own (docs/design.md#jobs).
	slots []*lockSlot
	// keys are lane keys listed (or written by this Queue) and not yet tried.
	keys []string
	// complete: keys held the whole lane when listed (fewer than laneBatch).
	complete bool
	// covered: the last whole-queue listing (refreshLanes) included the lane.
	covered  bool
	listedAt time.Time // when the lane was last listed
	gone     []goneKey // lane keys this Queue's claims deleted last (deleteLane)
	idle     int       // empty listings in a row

	// The schedule's fields, guarded by scheduler.mu.
	due    time.Time
	index  int       // position in scheduler.due; -1 while out of it
	trying bool      // a Claim is looking at the agent
	again  time.Time // the earliest due asked for while trying (zero: none)
}

// lockSlot is what a Queue knows of one of a lane's locks; guarded by its
// agentState's mu.
type lockSlot struct {
	k int // its slot: 0 is the agent's lock (layout.SlotLockKey)
	// lockExists: the lock object is known to exist.
	lockExists bool
	busyUntil  time.Time // the lock was held; do not read it before
	lockAt     time.Time // when the lock was last read for an orphan
	// freed is the lock as this Queue last freed it, or as its last claim
	// left it held when the claim ended (issue 12: no release write; see
	// Claim.end), at version freedVer: the next claim takes it by
	// compare-and-swap without reading it first.
	freed    *agentLock
	freedVer storage.Version
	// running: a claim of this Queue holds the lock.
	running bool
}

// slot returns lock slot k of a (k < 1 + len(a.slots) or one more).
// a.mu must be held.
func (a *agentState) slot(k int) *lockSlot {
	if k == 0 {
		return &a.lockSlot
	}
	for len(a.slots) < k {
		a.slots = append(a.slots, &lockSlot{k: len(a.slots) + 1})
	}
	return a.slots[k-1]
}

// allSlots is every lock slot of a this Queue used. a.mu must be held.
func (a *agentState) allSlots() []*lockSlot {
	return append([]*lockSlot{&a.lockSlot}, a.slots...)
}

// pickSlot chooses the lock of a, of the first n, a claim takes next at
// now: one this Queue kept (taken without a read), else the first not
// held by this Queue nor seen held a moment ago. nil when none: then next
// is when one may be free (zero: when a claim of this Queue ends).
//
// With no ready work (ready false) the claim only checks a lock for an
// orphan: the one checked longest ago of those known (made here, or
// listed by refreshAgents), so every lock of the lane is checked in turn
// and one a dead process held is taken after its lease.
func (a *agentState) pickSlot(n int, now time.Time, ready bool) (s *lockSlot, next time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n <= 1 {
		return &a.lockSlot, time.Time{}
	}
	if !ready {
		for _, c := range a.allSlots() {
			if c.k < n && !c.running && (s == nil || c.lockAt.Before(s.lockAt)) {
				s = c
			}
		}
		return s, time.Time{}
	}
	for _, s := range a.allSlots() {
		if s.k < n && !s.running && s.freed != nil {
			return s, time.Time{}
		}
	}
	for k := range n {
		s := a.slot(k)
		if s.running {
			continue
		}
		if !now.Before(s.busyUntil) {
			return s, time.Time{}
		}
		if next.IsZero() || s.busyUntil.Before(next) {
			next = s.busyUntil
		}
		// Past the last slot used so far, slot(k) makes a new one, which
		// is free: the loop ends there.
	}
	return nil, next
}

// scheduler holds every agent this Queue knows of, in order of when each
// is next worth a look, and wakes the Worker loops waiting for the first.
type scheduler struct {
	agentsMu sync.Mutex
	agents   map[string]*agentState

	mu   sync.Mutex
	due  dueHeap       // the agents by when each is next worth a look
	wake chan struct{} // closed when an agent becomes due sooner (see nextDue)
}

func newScheduler() *scheduler { return &scheduler{agents: map[string]*agentState{}} }

// agent returns the state of agent, creating it (and putting it in the
// schedule, due now) on first sight.
func (q *scheduler) agent(name string) *agentState {
	q.agentsMu.Lock()
	a := q.agents[name]
	created := a == nil
	if created {
		a = &agentState{name: name, index: -1}
		q.agents[name] = a
	}
	q.agentsMu.Unlock()
	if created {
		q.schedule(a, time.Time{}) // zero: due at once
	}
	return a
}

// all returns every agent known, in no order.
func (q *scheduler) all() []*agentState {
	q.agentsMu.Lock()
	defer q.agentsMu.Unlock()
	agents := make([]*agentState, 0, len(q.agents))
	for _, a := range q.agents {
		agents = append(agents, a)
	}
	return agents
}

// known is how many agents are known.
func (q *scheduler) known() int {
	q.agentsMu.Lock()
	defer q.agentsMu.Unlock()
	return len(q.agents)
}

// changed wakes the Worker loops waiting for an agent to be due: the
// lanes changed (lanes.changed).
func (q *scheduler) changed() {
	q.mu.Lock()
	q.wakeWaiters()
	q.mu.Unlock()
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
func (q *scheduler) schedule(a *agentState, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
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
func (q *scheduler) take(now time.Time) *agentState {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.due) == 0 || q.due[0].due.After(now) {
		return nil
	}
	a := heap.Pop(&q.due).(*agentState)
	a.trying = true
	return a
}

// putBack returns an agent a Claim took to the schedule, due at next or at
// what was asked for meanwhile, whichever is sooner.
func (q *scheduler) putBack(a *agentState, next time.Time) {
	q.mu.Lock()
	a.trying = false
	if !a.again.IsZero() && a.again.Before(next) {
		next = a.again
	}
	a.again = time.Time{}
	q.mu.Unlock()
	q.schedule(a, next)
}

// nextDue returns when the first agent is due (zero: none is known), and
// a channel closed when an agent becomes due sooner than that.
func (q *scheduler) nextDue() (time.Time, <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.wake == nil {
		q.wake = make(chan struct{})
	}
	if len(q.due) == 0 {
		return time.Time{}, q.wake
	}
	return q.due[0].due, q.wake
}

// wakeWaiters closes the channel nextDue handed out, if it handed one out.
// q.mu must be held.
func (q *scheduler) wakeWaiters() {
	if q.wake != nil {
		close(q.wake)
		q.wake = nil
	}
}
