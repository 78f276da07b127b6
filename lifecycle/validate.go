package lifecycle

import "slices"

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
	m.index = make(map[S]int, len(d.States))
	for i, s := range d.States {
		if s == "" {
			return m.fail("empty state name")
		}
		if _, dup := m.index[s]; dup {
			return m.fail("state %q listed twice", s)
		}
		m.index[s] = i
	}
	if !m.IsState(d.Initial) {
		return m.fail("initial state %q is not in States", d.Initial)
	}
	if len(d.Terminal) == 0 {
		return m.fail("no terminal state")
	}
	for _, s := range d.Terminal {
		i, ok := m.index[s]
		if !ok {
			return m.fail("terminal state %q is not in States", s)
		}
		m.terminal |= 1 << i
	}

	m.next = make([]uint64, len(d.States))
	m.edges = make(map[[2]int]int, len(d.Transitions))
	type fromEvent struct {
		from  S
		event Event
	}
	byEvent := map[fromEvent][]int{}
	for k, t := range d.Transitions {
		i, ok := m.index[t.From]
		if !ok {
			return m.fail("transition %d: unknown state %q", k, t.From)
		}
		j, ok := m.index[t.To]
		if !ok {
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
		if m.terminal&(1<<i) != 0 && !t.Requeue {
			return m.fail("terminal state %q has an outbound transition to %q", t.From, t.To)
		}
		if _, dup := m.edges[[2]int{i, j}]; dup {
			return m.fail("duplicate transition %s → %s", t.From, t.To)
		}
		m.edges[[2]int{i, j}] = k
		m.next[i] |= 1 << j
		fe := fromEvent{t.From, t.Event}
		for _, other := range byEvent[fe] {
			if t.Guard == nil || d.Transitions[other].Guard == nil {
				return m.fail("event %q leaves %q by more than one transition without guards", t.Event, t.From)
			}
		}
		byEvent[fe] = append(byEvent[fe], k)
	}

	// Every state must be reachable from the initial one.
	seen := uint64(1) << m.index[d.Initial]
	queue := []int{m.index[d.Initial]}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for j := range d.States {
			if m.next[i]&(1<<j) != 0 && seen&(1<<j) == 0 {
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
