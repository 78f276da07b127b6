package machine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

type light string

type lamp struct{ state light }

func lampDef() machine.Definition[light, *lamp] {
	who := []lifecycle.Actor{lifecycle.ActorSystem}
	return machine.Definition[light, *lamp]{
		Name:     "lamp",
		Initial:  "off",
		States:   []light{"off", "on", "broken"},
		Terminal: []light{"broken"},
		Transitions: []machine.Transition[light, *lamp]{
			{From: "off", To: "on", Event: "press", Actors: who},
			{From: "on", To: "off", Event: "press", Actors: who},
			{From: "on", To: "broken", Event: "drop", Actors: who},
		},
		GetState: func(l *lamp) light { return l.state },
		SetState: func(l *lamp, s light) { l.state = s },
	}
}

func TestNewRefusesBadDefinitions(t *testing.T) {
	t.Parallel()
	who := []lifecycle.Actor{lifecycle.ActorSystem}
	guard := &machine.Guard[*lamp]{Name: "always", Allow: func(*lamp) bool { return true }}
	tests := []struct {
		name   string
		change func(d *machine.Definition[light, *lamp])
		want   string
	}{
		{"empty name", func(d *machine.Definition[light, *lamp]) { d.Name = "" }, "empty name"},
		{"no accessors", func(d *machine.Definition[light, *lamp]) { d.GetState = nil }, "GetState and SetState"},
		{"no states", func(d *machine.Definition[light, *lamp]) { d.States = nil }, "no states"},
		{"duplicate state", func(d *machine.Definition[light, *lamp]) { d.States = append(d.States, "on") }, `"on" listed twice`},
		{"empty state", func(d *machine.Definition[light, *lamp]) { d.States = append(d.States, "") }, "empty state name"},
		{"unknown initial", func(d *machine.Definition[light, *lamp]) { d.Initial = "dim" }, `initial state "dim"`},
		{"terminal initial", func(d *machine.Definition[light, *lamp]) { d.Terminal = []light{"off", "broken"} }, "outbound"},
		{"no terminal", func(d *machine.Definition[light, *lamp]) { d.Terminal = nil }, "no terminal state"},
		{"unknown terminal", func(d *machine.Definition[light, *lamp]) { d.Terminal = []light{"gone"} }, `terminal state "gone" is not in States`},
		{"unknown from", func(d *machine.Definition[light, *lamp]) {
			d.Transitions = append(d.Transitions, machine.Transition[light, *lamp]{From: "dim", To: "on", Event: "x", Actors: who})
		}, `unknown state "dim"`},
		{"unknown to", func(d *machine.Definition[light, *lamp]) {
			d.Transitions = append(d.Transitions, machine.Transition[light, *lamp]{From: "on", To: "dim", Event: "x", Actors: who})
		}, `unknown state "dim"`},
		{"terminal with outbound edge", func(d *machine.Definition[light, *lamp]) {
			d.Transitions = append(d.Transitions, machine.Transition[light, *lamp]{From: "broken", To: "off", Event: "fix", Actors: who})
		}, `terminal state "broken" has an outbound transition`},
		{"unreachable state", func(d *machine.Definition[light, *lamp]) { d.States = append(d.States, "lost") }, `"lost" is unreachable`},
		{"duplicate edge", func(d *machine.Definition[light, *lamp]) {
			d.Transitions = append(d.Transitions, machine.Transition[light, *lamp]{From: "off", To: "on", Event: "flip", Actors: who})
		}, "duplicate transition off → on"},
		{"ambiguous event", func(d *machine.Definition[light, *lamp]) {
			d.Transitions = append(d.Transitions, machine.Transition[light, *lamp]{From: "on", To: "on", Event: "press", Actors: who})
		}, `event "press" leaves "on" by more than one transition without guards`},
		{"empty event", func(d *machine.Definition[light, *lamp]) { d.Transitions[0].Event = "" }, "empty event"},
		{"no actors", func(d *machine.Definition[light, *lamp]) { d.Transitions[0].Actors = nil }, "no actors"},
		{"nameless guard", func(d *machine.Definition[light, *lamp]) {
			d.Transitions[0].Guard = &machine.Guard[*lamp]{Allow: guard.Allow}
		}, "a guard needs a Name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			def := lampDef()
			tt.change(&def)
			m, err := machine.New(def)
			if err == nil {
				t.Fatalf("New accepted the definition: %v", m.Spec())
			}
			if !errors.Is(err, machine.ErrInvalidDefinition) {
				t.Errorf("error %v does not match ErrInvalidDefinition", err)
			}
			var de *machine.DefinitionError
			if !errors.As(err, &de) || de.Machine != def.Name {
				t.Errorf("error %v is not a *DefinitionError for %q", err, def.Name)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestNewAcceptsRequeueOutOfTerminal(t *testing.T) {
	t.Parallel()
	def := lampDef()
	def.Transitions = append(def.Transitions, machine.Transition[light, *lamp]{
		From: "broken", To: "off", Event: "repair", Actors: []lifecycle.Actor{lifecycle.ActorAdmin}, Requeue: true})
	m, err := machine.New(def)
	if err != nil {
		t.Fatal(err)
	}
	if !m.IsTerminal("broken") || !m.Allowed("broken", "off") {
		t.Errorf("requeue edge out of terminal state not kept")
	}
}

func TestDefinitionIsCopied(t *testing.T) {
	t.Parallel()
	def := lampDef()
	m := machine.MustNew(def)
	def.States[0] = "mutated"
	def.Transitions[0].Actors[0] = lifecycle.ActorMastra
	if m.States()[0] != "off" {
		t.Errorf("machine shares States with its definition")
	}
	if tr, _ := m.Edge("off", "on"); tr.Actors[0] != lifecycle.ActorSystem {
		t.Errorf("machine shares Actors with its definition")
	}
	m.States()[0] = "mutated"
	m.Transitions()[0].Actors[0] = lifecycle.ActorMastra
	if m.States()[0] != "off" || m.Transitions()[0].Actors[0] != lifecycle.ActorSystem {
		t.Errorf("accessors return shared slices")
	}
}

func TestMustNewPanicsOnBadDefinition(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("MustNew did not panic")
		}
	}()
	def := lampDef()
	def.Name = ""
	machine.MustNew(def)
}

func TestQueries(t *testing.T) {
	t.Parallel()
	m := machine.CancelableRun()
	if got := m.Next(machine.CancelableRunning); len(got) != 5 {
		t.Errorf("Next(running) = %v", got)
	}
	if m.Next("bogus") != nil {
		t.Errorf("Next of an unknown state is not nil")
	}
	for _, s := range m.States() {
		want := s == "succeeded" || s == "failed" || s == "canceled" || s == "timeout"
		if m.IsTerminal(s) != want {
			t.Errorf("IsTerminal(%q) = %v", s, !want)
		}
	}
	if m.IsTerminal("bogus") || m.IsState("bogus") {
		t.Errorf("unknown state reported as a state")
	}
	if _, ok := m.Edge("bogus", "running"); ok {
		t.Errorf("Edge of unknown state found")
	}
	if _, ok := m.Edge(machine.CancelableQueued, machine.CancelableSucceeded); ok {
		t.Errorf("Edge queued → succeeded found")
	}
	tr, ok := m.Edge(machine.CancelableRunning, machine.CancelableCancelRequested)
	if !ok || tr.Event != machine.EventRequestCancel {
		t.Errorf("Edge(running, cancel_requested) = %+v, %v", tr, ok)
	}
}
