package run

import (
	"fmt"
	"slices"
	"strings"

	"github.com/runconveyor/conveyor/lifecycle"
)

// catalog is the runner's agents and the flows of every run machine: what
// a run's slug and status.json say it is. It never changes after
// NewRunner, so it is read without a lock.
type catalog struct {
	agents map[string]*agentDef
	// flows holds the flow of every run machine by its status.json name
	// ("" is the canonical one), for runs created under another config.
	flows map[string]*flow
}

type agentDef struct {
	Agent
	flow        flow
	concurrency int
	// graph is the shape of a graph agent's steps; nil for a linear one.
	graph *graph
}

// newCatalog checks the agents and gives each its flow and concurrency
// (defaultConcurrency when it sets none).
func newCatalog(defaultConcurrency int, agents []Agent) (*catalog, error) {
	if len(agents) == 0 {
		return nil, fmt.Errorf("%w: no agents", ErrInvalidConfig)
	}
	c := &catalog{agents: map[string]*agentDef{}, flows: map[string]*flow{}}
	for _, m := range []string{"", lifecycle.MachineCanonical, lifecycle.MachineCancelable, lifecycle.MachineApproval} {
		f, _ := flowFor(m)
		c.flows[m] = &f
	}
	for _, a := range agents {
		f, err := validateAgent(a)
		if err != nil {
			return nil, err
		}
		if _, dup := c.agents[a.Slug]; dup {
			return nil, fmt.Errorf("%w: agent %s given twice", ErrInvalidConfig, a.Slug)
		}
		def := &agentDef{Agent: a, flow: f, concurrency: a.Concurrency}
		if def.concurrency <= 0 {
			def.concurrency = defaultConcurrency
		}
		def.Steps = append([]Step(nil), a.Steps...)
		if def.graph, err = newGraph(a.Slug, def.Steps); err != nil {
			return nil, err
		}
		c.agents[a.Slug] = def
	}
	return c, nil
}

// agent is the agent of slug, when this runner has it.
func (c *catalog) agent(slug string) (*agentDef, bool) {
	a, ok := c.agents[slug]
	return a, ok
}

// list is the agents as they are in effect, sorted by slug (see
// Runner.Agents); the slices are copies.
func (c *catalog) list() []Agent {
	out := make([]Agent, 0, len(c.agents))
	for _, def := range c.agents {
		a := def.Agent
		a.Steps = append([]Step(nil), def.Steps...)
		a.Machine = def.flow.machine
		a.Concurrency = def.concurrency
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Agent) int { return strings.Compare(a.Slug, b.Slug) })
	return out
}

// slugs are this runner's agents, sorted.
func (c *catalog) slugs() []string {
	out := make([]string, 0, len(c.agents))
	for s := range c.agents {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// knownStatus tells whether s is a state of a run machine.
func (c *catalog) knownStatus(s string) bool {
	for _, m := range []string{lifecycle.MachineCanonical, lifecycle.MachineCancelable, lifecycle.MachineApproval} {
		if f, ok := flowFor(m); ok && f.isState(s) {
			return true
		}
	}
	return false
}

// flowOfDoc is the flow of the machine the run was created with (its
// status.json's machine field), which is not always the one its agent is
// configured with now.
func (c *catalog) flowOfDoc(d *lifecycle.RunStatus) *flow {
	if f, ok := c.flows[d.Machine]; ok {
		return f
	}
	return c.flows[""]
}
