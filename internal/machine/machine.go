package machine

import (
	"github.com/runconveyor/conveyor/lifecycle"

	"fmt"
	"slices"

	"github.com/qmuntal/stateless"
)

// Guard is a named condition on the record a transition may require, e.g. the
// job machine's "attempt < max_attempts". Its Name appears in diagrams and
// errors; Allow must not have side effects.
type Guard[R any] struct {
	Name  string
	Allow func(R) bool
}

// Transition is one row of a machine's table.
type Transition[S ~string, R any] struct {
	From  S
	To    S
	Event lifecycle.Event
	// Actors may make this transition; nobody else can.
	Actors []lifecycle.Actor
	// Guard, when set, must allow the record for the move to happen. Two
	// transitions may share From and Event only when both are guarded, and
	// their guards must never both allow one record.
	Guard *Guard[R]
	// Extension marks a transition Conveyor adds to the platform's table
	// (docs/spec.md#extensions); diagrams mark it too.
	Extension bool
	// Requeue marks an operator's manual requeue (invariant F2,
	// docs/spec.md#job-lifecycle): the only kind
	// of transition allowed out of a terminal state.
	Requeue bool
}

// Definition is the plain data of a machine, given to [New].
type Definition[S ~string, R any] struct {
	// Name identifies the machine in errors and exports, e.g. "canonical-run".
	Name string
	// Initial is the state a new record starts in.
	Initial S
	// States lists every state, in the order States() reports them.
	States []S
	// Terminal lists the states that end the lifecycle.
	Terminal []S
	// Transitions is the table.
	Transitions []Transition[S, R]
	// GetState reads the state of a record; SetState writes it. Fire calls
	// SetState only for a move the table allows.
	GetState func(R) S
	SetState func(R, S)
}

// Machine is a validated, immutable lifecycle. Its methods are safe for
// concurrent use.
type Machine[S ~string, R any] struct {
	def    Definition[S, R]
	tab    table
	edges  map[[2]int]int // (from, to) positions → index in def.Transitions
	engine *stateless.StateMachine
	boxed  []stateless.State // the table's states as the engine's interface values, by position
}

// maxStates bounds a machine so its adjacency fits in one word per state.
const maxStates = 64

// New validates def and builds its machine. It refuses (with a
// [*DefinitionError]) an empty name, duplicate or unknown states, more than
// 64 states, a terminal state with an outbound transition other than a
// Requeue, a state unreachable from the initial one, a duplicate from → to
// edge, an event shared by unguarded transitions out of one state, a
// transition without an event or actors, and missing state accessors.
func New[S ~string, R any](def Definition[S, R]) (*Machine[S, R], error) {
	m := &Machine[S, R]{
		def: Definition[S, R]{
			Name:        def.Name,
			Initial:     def.Initial,
			States:      slices.Clone(def.States),
			Terminal:    slices.Clone(def.Terminal),
			Transitions: slices.Clone(def.Transitions),
			GetState:    def.GetState,
			SetState:    def.SetState,
		},
	}
	for i := range m.def.Transitions {
		m.def.Transitions[i].Actors = slices.Clone(m.def.Transitions[i].Actors)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	for _, st := range m.def.States {
		m.boxed = append(m.boxed, st)
	}
	m.engine = m.buildEngine()
	return m, nil
}

// MustNew is New for tables fixed at compile time; it panics on a definition
// error, which the package's tests rule out for its own machines.
func MustNew[S ~string, R any](def Definition[S, R]) *Machine[S, R] {
	m, err := New(def)
	if err != nil {
		panic(err)
	}
	return m
}

func (m *Machine[S, R]) fail(format string, args ...any) error {
	return &DefinitionError{Machine: m.def.Name, Problem: fmt.Sprintf(format, args...)}
}

// Name is the machine's name, e.g. "canonical-run".
func (m *Machine[S, R]) Name() string { return m.def.Name }

// Initial is the state a new record starts in.
func (m *Machine[S, R]) Initial() S { return m.def.Initial }

// States lists every state in table order.
func (m *Machine[S, R]) States() []S { return slices.Clone(m.def.States) }

// Terminal lists the terminal states.
func (m *Machine[S, R]) Terminal() []S { return slices.Clone(m.def.Terminal) }

// Transitions returns a copy of the table.
func (m *Machine[S, R]) Transitions() []Transition[S, R] {
	out := slices.Clone(m.def.Transitions)
	for i := range out {
		out[i].Actors = slices.Clone(out[i].Actors)
	}
	return out
}

// IsState tells whether s is a state of the machine.
func (m *Machine[S, R]) IsState(s S) bool { return m.tab.find(string(s)) >= 0 }

// IsTerminal tells whether s is a terminal state.
func (m *Machine[S, R]) IsTerminal(s S) bool {
	i := m.tab.find(string(s))
	return i >= 0 && m.tab.terminal&(1<<i) != 0
}

// Allowed tells whether the table has a from → to transition. It does not
// allocate.
func (m *Machine[S, R]) Allowed(from, to S) bool { return m.tab.allowed(string(from), string(to)) }

// Check returns nil when the table has a from → to transition and an
// [*InvalidTransitionError] otherwise. The nil path does not allocate. It
// checks neither actors nor guards; see [Machine.Edge] and [Machine.Fire].
func (m *Machine[S, R]) Check(from, to S) error {
	if m.tab.allowedHashed(string(from), string(to)) {
		return nil
	}
	return m.checkFailed(from, to)
}

// checkFailed builds Check's error out of line, keeping Check inlinable.
func (m *Machine[S, R]) checkFailed(from, to S) error { return m.invalid(from, to, "", nil) }

// Next lists the states reachable from s in one move, in table order.
func (m *Machine[S, R]) Next(s S) []S {
	i := m.tab.find(string(s))
	if i < 0 {
		return nil
	}
	var out []S
	for j, st := range m.def.States {
		if m.tab.next[i]&(1<<j) != 0 {
			out = append(out, st)
		}
	}
	return out
}

// Edge returns the transition from → to, if the table has one.
func (m *Machine[S, R]) Edge(from, to S) (Transition[S, R], bool) {
	i, j := m.tab.find(string(from)), m.tab.find(string(to))
	if i < 0 || j < 0 {
		return Transition[S, R]{}, false
	}
	k, ok := m.edges[[2]int{i, j}]
	if !ok {
		return Transition[S, R]{}, false
	}
	t := m.def.Transitions[k]
	t.Actors = slices.Clone(t.Actors)
	return t, true
}

// CheckActor is [Machine.Check] plus the actor: it returns an
// [*InvalidTransitionError] when the table has no from → to transition and a
// [*ForbiddenActorError] when actor may not make it. Guards are not evaluated.
func (m *Machine[S, R]) CheckActor(from, to S, actor lifecycle.Actor) error {
	if err := m.Check(from, to); err != nil {
		return err
	}
	t := m.def.Transitions[m.edges[[2]int{m.tab.find(string(from)), m.tab.find(string(to))}]]
	if !slices.Contains(t.Actors, actor) {
		return m.forbidden(t, actor)
	}
	return nil
}

func (m *Machine[S, R]) invalid(from, to S, event lifecycle.Event, guards []string) *lifecycle.InvalidTransitionError {
	e := &lifecycle.InvalidTransitionError{
		Machine:  m.def.Name,
		From:     string(from),
		To:       string(to),
		Event:    string(event),
		Terminal: m.IsTerminal(from),
		Guards:   guards,
	}
	switch {
	case !m.IsState(from):
		e.Unknown = string(from)
	case to != "" && !m.IsState(to):
		e.Unknown = string(to)
	}
	for _, s := range m.Next(from) {
		e.ValidNext = append(e.ValidNext, string(s))
	}
	return e
}

func (m *Machine[S, R]) forbidden(t Transition[S, R], actor lifecycle.Actor) *lifecycle.ForbiddenActorError {
	return &lifecycle.ForbiddenActorError{
		Machine: m.def.Name,
		From:    string(t.From),
		To:      string(t.To),
		Event:   string(t.Event),
		Actor:   actor,
		Allowed: slices.Clone(t.Actors),
	}
}

// Actors lists every known actor.
func Actors() []lifecycle.Actor {
	return []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorOrchestration, lifecycle.ActorNLMBackend,
		lifecycle.ActorMastra, lifecycle.ActorAdmin, lifecycle.ActorFrontend, lifecycle.ActorSystem}
}
