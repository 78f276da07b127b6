package machine

import "github.com/runconveyor/conveyor/lifecycle"

// Spec describes the machine as plain data.
func (m *Machine[S, R]) Spec() lifecycle.Spec {
	s := lifecycle.Spec{
		Name:        m.def.Name,
		Initial:     string(m.def.Initial),
		States:      toStrings(m.def.States),
		Terminal:    toStrings(m.def.Terminal),
		Transitions: make([]lifecycle.SpecTransition, len(m.def.Transitions)),
	}
	for i, t := range m.def.Transitions {
		st := lifecycle.SpecTransition{
			From:      string(t.From),
			To:        string(t.To),
			Event:     string(t.Event),
			Actors:    append([]lifecycle.Actor(nil), t.Actors...),
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
