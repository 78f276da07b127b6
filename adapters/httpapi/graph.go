package httpapi

import (
	"slices"

	"github.com/runconveyor/conveyor/lifecycle/run"
)

// graphOf is a graph agent's dependencies by step name (every step,
// those with none too, so the page draws each), nil for a linear agent.
func graphOf(steps []run.Step) map[string][]string {
	if !slices.ContainsFunc(steps, func(s run.Step) bool { return len(s.After) > 0 }) {
		return nil
	}
	m := make(map[string][]string, len(steps))
	for _, s := range steps {
		m[s.Name] = append([]string{}, s.After...)
	}
	return m
}
