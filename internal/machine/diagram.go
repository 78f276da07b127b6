package machine

import (
	"github.com/runconveyor/conveyor/lifecycle"

	"fmt"
	"slices"
	"strings"
)

// label is the text a diagram shows on an edge: the event, its guard, and
// marks for extensions and operator requeues.
func label(t lifecycle.SpecTransition) string {
	l := t.Event
	if t.Guard != "" {
		l += " [" + t.Guard + "]"
	}
	if t.Requeue {
		l += " (operator requeue)"
	}
	if t.Extension {
		l += " (extension)"
	}
	return l
}

// Mermaid draws the machine as a Mermaid stateDiagram-v2: the initial state
// from [*], every transition labelled with its event (and guard), terminal
// states to [*], and extensions marked "(extension)".
func Mermaid(s lifecycle.Spec) string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	fmt.Fprintf(&b, "    %%%% %s\n", s.Name)
	fmt.Fprintf(&b, "    [*] --> %s\n", s.Initial)
	for _, t := range s.Transitions {
		fmt.Fprintf(&b, "    %s --> %s : %s\n", t.From, t.To, label(t))
	}
	for _, st := range s.States {
		if slices.Contains(s.Terminal, st) {
			fmt.Fprintf(&b, "    %s --> [*]\n", st)
		}
	}
	return b.String()
}

// DOT draws the machine in Graphviz DOT: terminal states as double circles,
// extensions dashed, operator requeues dotted.
func DOT(s lifecycle.Spec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n", s.Name)
	b.WriteString("    rankdir=LR;\n")
	b.WriteString("    node [shape=box, style=rounded];\n")
	b.WriteString("    \"__initial\" [shape=point, label=\"\"];\n")
	for _, st := range s.States {
		if slices.Contains(s.Terminal, st) {
			fmt.Fprintf(&b, "    %q [shape=doublecircle, style=\"\"];\n", st)
		}
	}
	fmt.Fprintf(&b, "    \"__initial\" -> %q;\n", s.Initial)
	for _, t := range s.Transitions {
		attrs := []string{fmt.Sprintf("label=%q", label(t))}
		switch {
		case t.Extension:
			attrs = append(attrs, "style=dashed")
		case t.Requeue:
			attrs = append(attrs, "style=dotted")
		}
		fmt.Fprintf(&b, "    %q -> %q [%s];\n", t.From, t.To, strings.Join(attrs, ", "))
	}
	b.WriteString("}\n")
	return b.String()
}
