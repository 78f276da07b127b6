// Package machinetest checks lifecycle machines against the tables of the
// specs: the whole from × to grid, structural properties, and random walks
// that must never leave the table. The machine packages' tests share it.
package machinetest

import (
	"context"
	"errors"
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Grid compares every from × to pair of m with want, the spec's table
// transcribed independently: want[from] lists the states from may move to.
// A state missing from want has no outbound moves.
func Grid[S ~string, R any](t *testing.T, m *machine.Machine[S, R], want map[S][]S) {
	t.Helper()
	for from := range want {
		if !m.IsState(from) {
			t.Errorf("%s: the spec's table names %q, which the machine lacks", m.Name(), from)
		}
	}
	for _, from := range m.States() {
		for _, to := range m.States() {
			expected := slices.Contains(want[from], to)
			if got := m.Allowed(from, to); got != expected {
				t.Errorf("%s: Allowed(%q, %q) = %v, the spec says %v", m.Name(), from, to, got, expected)
			}
			err := m.Check(from, to)
			if expected != (err == nil) {
				t.Errorf("%s: Check(%q, %q) = %v, the spec says allowed=%v", m.Name(), from, to, err, expected)
			}
			if err != nil && !errors.Is(err, lifecycle.ErrInvalidTransition) {
				t.Errorf("%s: Check(%q, %q) error %v does not match ErrInvalidTransition", m.Name(), from, to, err)
			}
		}
		next := m.Next(from)
		wantNext := slices.Clone(want[from])
		sortStates(next)
		sortStates(wantNext)
		if diff := cmp.Diff(wantNext, next); diff != "" && !(len(next) == 0 && len(wantNext) == 0) {
			t.Errorf("%s: Next(%q) mismatch (-spec +machine):\n%s", m.Name(), from, diff)
		}
	}
}

func sortStates[S ~string](s []S) { sort.Slice(s, func(i, j int) bool { return s[i] < s[j] }) }

// Structure checks the properties every machine must have: every state
// reachable from the initial one; from every non-terminal state some terminal
// state reachable; terminal states without outbound moves except operator
// requeues; no move by the Mastra runtime or the read-only frontend.
func Structure(t *testing.T, s lifecycle.Spec) {
	t.Helper()
	adj := map[string][]string{}
	for _, tr := range s.Transitions {
		adj[tr.From] = append(adj[tr.From], tr.To)
		if slices.Contains(s.Terminal, tr.From) && !tr.Requeue {
			t.Errorf("%s: terminal state %q has outbound move to %q that is no operator requeue", s.Name, tr.From, tr.To)
		}
		for _, a := range tr.Actors {
			if a == lifecycle.ActorMastra || a == lifecycle.ActorFrontend {
				t.Errorf("%s: %s → %s lists actor %q, which never writes status", s.Name, tr.From, tr.To, a)
			}
		}
		if tr.Requeue && !slices.Equal(tr.Actors, []lifecycle.Actor{lifecycle.ActorAdmin}) {
			t.Errorf("%s: requeue %s → %s must be the admin's alone, has %v", s.Name, tr.From, tr.To, tr.Actors)
		}
	}
	reach := func(from string) map[string]bool {
		seen := map[string]bool{from: true}
		queue := []string{from}
		for len(queue) > 0 {
			cur := queue[0]
			queue = queue[1:]
			for _, n := range adj[cur] {
				if !seen[n] {
					seen[n] = true
					queue = append(queue, n)
				}
			}
		}
		return seen
	}
	fromInitial := reach(s.Initial)
	for _, st := range s.States {
		if !fromInitial[st] {
			t.Errorf("%s: %q is unreachable from %q", s.Name, st, s.Initial)
		}
		if slices.Contains(s.Terminal, st) {
			continue
		}
		r := reach(st)
		if !slices.ContainsFunc(s.Terminal, func(term string) bool { return r[term] }) {
			t.Errorf("%s: no terminal state is reachable from %q", s.Name, st)
		}
	}
}

// Walk fires a sequence of events chosen by the bytes of choices at a record
// that starts in the machine's initial state, and checks after every step
// that the walk never left the table: a successful fire made a move the table
// has, by an actor it lists, whose guard allowed the record; a refused fire
// left the record's state untouched and said why with a typed error. A byte
// below 128 picks among the moves the current state offers (so walks get
// deep); one above picks any event or actor at all (so they get refused).
// mutate,
// when set, gets one byte per step to change guard inputs (an attempt count).
// It returns the states visited.
func Walk[S ~string, R any](t *testing.T, m *machine.Machine[S, R], newRec func(S) R, state func(R) S,
	mutate func(R, byte), choices []byte) []S {
	t.Helper()
	ctx := context.Background()
	table := m.Transitions()
	var events []lifecycle.Event
	for _, tr := range table {
		if !slices.Contains(events, tr.Event) {
			events = append(events, tr.Event)
		}
	}
	events = append(events, "no-such-event")
	actors := machine.Actors()

	rec := newRec(m.Initial())
	visited := []S{m.Initial()}
	for i := 0; i+1 < len(choices); i += 2 {
		if mutate != nil {
			mutate(rec, choices[i]>>4)
		}
		from := state(rec)
		event, actor := choose(table, from, events, actors, choices[i], choices[i+1])
		change, err := m.Fire(ctx, rec, event, actor)
		to := state(rec)
		if err != nil {
			if to != from {
				t.Fatalf("%s: refused fire of %q by %s moved %q to %q", m.Name(), event, actor, from, to)
			}
			if !errors.Is(err, lifecycle.ErrInvalidTransition) && !errors.Is(err, lifecycle.ErrForbiddenActor) {
				t.Fatalf("%s: fire of %q from %q: untyped error %v", m.Name(), event, from, err)
			}
			if m.IsTerminal(from) && !errors.Is(err, lifecycle.ErrTerminalState) && errors.Is(err, lifecycle.ErrInvalidTransition) {
				t.Fatalf("%s: refusal from terminal %q does not match ErrTerminalState: %v", m.Name(), from, err)
			}
			continue
		}
		edge, ok := m.Edge(from, to)
		if !ok {
			t.Fatalf("%s: fire of %q moved %q to %q, which the table lacks", m.Name(), event, from, to)
		}
		if edge.Event != event || !slices.Contains(edge.Actors, actor) {
			t.Fatalf("%s: fire of %q by %s took %s → %s (event %q, actors %v)", m.Name(), event, actor, from, to, edge.Event, edge.Actors)
		}
		if edge.Guard != nil && !edge.Guard.Allow(rec) {
			t.Fatalf("%s: fire took guarded %s → %s though %q refuses the record", m.Name(), from, to, edge.Guard.Name)
		}
		if change.From != from || change.To != to || change.Event != event || change.Actor != actor {
			t.Fatalf("%s: Change %+v does not describe %s → %s", m.Name(), change, from, to)
		}
		visited = append(visited, to)
	}
	return visited
}

// choose picks the event and actor of one step from two choice bytes: below
// 128, an edge the table offers from from (and one of its actors); else
// any event (an unknown one included) and any actor.
func choose[S ~string, R any](table []machine.Transition[S, R], from S, events []lifecycle.Event, actors []lifecycle.Actor,
	ce, ca byte) (lifecycle.Event, lifecycle.Actor) {
	var offered []machine.Transition[S, R]
	for _, tr := range table {
		if tr.From == from {
			offered = append(offered, tr)
		}
	}
	event := events[int(ce)%len(events)]
	actor := actors[int(ca)%len(actors)]
	if ce < 128 && len(offered) > 0 {
		tr := offered[int(ce)%len(offered)]
		event = tr.Event
		if ca < 128 {
			actor = tr.Actors[int(ca)%len(tr.Actors)]
		}
	}
	return event, actor
}
