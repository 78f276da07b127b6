package lifecycle

// Spec is the plain, non-generic description of a machine: what the JSON
// export prints and the diagrams draw. Every machine has one ([Machine.Spec]),
// so tools can handle machines of different state types alike.
type Spec struct {
	Name        string           `json:"name"`
	Initial     string           `json:"initial"`
	States      []string         `json:"states"`
	Terminal    []string         `json:"terminal"`
	Transitions []SpecTransition `json:"transitions"`
}

// SpecTransition is one row of a [Spec]. Guard, Extension and Requeue are
// drawn in diagrams but left out of the JSON export, whose shape is fixed.
type SpecTransition struct {
	From      string  `json:"from"`
	To        string  `json:"to"`
	Event     string  `json:"event"`
	Actors    []Actor `json:"actors"`
	Guard     string  `json:"-"`
	Extension bool    `json:"-"`
	Requeue   bool    `json:"-"`
}

// Spec describes the machine as plain data.
func (m *Machine[S, R]) Spec() Spec {
	s := Spec{
		Name:        m.def.Name,
		Initial:     string(m.def.Initial),
		States:      toStrings(m.def.States),
		Terminal:    toStrings(m.def.Terminal),
		Transitions: make([]SpecTransition, len(m.def.Transitions)),
	}
	for i, t := range m.def.Transitions {
		st := SpecTransition{
			From:      string(t.From),
			To:        string(t.To),
			Event:     string(t.Event),
			Actors:    append([]Actor(nil), t.Actors...),
			Extension: t.Extension,
			Requeue:   t.Requeue,
		}
		if t.Guard != nil {
			st.Guard = t.Guard.Name
		}
		s.Transitions[i] = st
	}
	return s
}

func toStrings[S ~string](in []S) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}
