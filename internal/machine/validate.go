package machine

import (
	"slices"

	"github.com/runconveyor/conveyor/lifecycle"
)

// validate checks the definition and fills the lookup tables.
func (m *Machine[S, R]) validate() error {
	d := &m.def
	if d.Name == "" {
		return m.fail("empty name")
	}
	if d.GetState == nil || d.SetState == nil {
		return m.fail("GetState and SetState are required")
	}
	if len(d.States) == 0 {
		return m.fail("no states")
	}
	if len(d.States) > maxStates {
		return m.fail("%d states; at most %d are supported", len(d.States), maxStates)
	}
	m.tab.names = toStrings(d.States)
	m.tab.byName = make(map[string]int, len(d.States))
	for i, s := range m.tab.names {
		if s == "" {
			return m.fail("empty state name")
		}
		if _, dup := m.tab.byName[s]; dup {
			return m.fail("state %q listed twice", s)
		}
		m.tab.byName[s] = i
	}
	m.tab.hashNames()
	if err := m.validateEnds(); err != nil {
		return err
	}
	if err := m.validateTransitions(); err != nil {
		return err
	}
	return m.validateReach()
}

// validateEnds checks the initial and terminal states and fills the
// terminal set.
func (m *Machine[S, R]) validateEnds() error {
	d := &m.def
	if !m.IsState(d.Initial) {
		return m.fail("initial state %q is not in States", d.Initial)
	}
	if len(d.Terminal) == 0 {
		return m.fail("no terminal state")
	}
	for _, s := range d.Terminal {
		i := m.tab.find(string(s))
		if i < 0 {
			return m.fail("terminal state %q is not in States", s)
		}
		m.tab.terminal |= 1 << i
	}
	return nil
}

// validateTransitions checks every transition and fills the edge tables.
func (m *Machine[S, R]) validateTransitions() error {
	d := &m.def
	m.tab.next = make([]uint64, len(d.States))
	m.edges = make(map[[2]int]int, len(d.Transitions))
	type fromEvent struct {
		from  S
		event lifecycle.Event
	}
	byEvent := map[fromEvent][]int{}
	for k, t := range d.Transitions {
		i := m.tab.find(string(t.From))
		if i < 0 {
			return m.fail("transition %d: unknown state %q", k, t.From)
		}
		j := m.tab.find(string(t.To))
		if j < 0 {
			return m.fail("transition %d: unknown state %q", k, t.To)
		}
		if t.Event == "" {
			return m.fail("transition %s → %s: empty event", t.From, t.To)
		}
		if len(t.Actors) == 0 {
			return m.fail("transition %s → %s: no actors", t.From, t.To)
		}
		if t.Guard != nil && (t.Guard.Name == "" || t.Guard.Allow == nil) {
			return m.fail("transition %s → %s: a guard needs a Name and an Allow func", t.From, t.To)
		}
		if m.tab.terminal&(1<<i) != 0 && !t.Requeue {
			return m.fail("terminal state %q has an outbound transition to %q", t.From, t.To)
		}
		if _, dup := m.edges[[2]int{i, j}]; dup {
			return m.fail("duplicate transition %s → %s", t.From, t.To)
		}
		m.edges[[2]int{i, j}] = k
		m.tab.next[i] |= 1 << j
		fe := fromEvent{t.From, t.Event}
		for _, other := range byEvent[fe] {
			if t.Guard == nil || d.Transitions[other].Guard == nil {
				return m.fail("event %q leaves %q by more than one transition without guards", t.Event, t.From)
			}
		}
		byEvent[fe] = append(byEvent[fe], k)
	}
	return nil
}

// validateReach checks that every state is reachable from the initial one.
func (m *Machine[S, R]) validateReach() error {
	d := &m.def
	start := m.tab.find(string(d.Initial))
	seen := uint64(1) << start
	queue := []int{start}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for j := range d.States {
			if m.tab.next[i]&(1<<j) != 0 && seen&(1<<j) == 0 {
				seen |= 1 << j
				queue = append(queue, j)
			}
		}
	}
	for i, s := range d.States {
		if seen&(1<<i) == 0 {
			return m.fail("state %q is unreachable from %q", s, d.Initial)
		}
	}
	if slices.Contains(d.Terminal, d.Initial) {
		return m.fail("initial state %q is terminal", d.Initial)
	}
	return nil
}
