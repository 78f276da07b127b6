package run

import (
	"context"
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

// flow tells the Runner how one run machine expresses the Runner's
// operations. An empty event means the machine has no such move: the
// operation is a plain field update (a step count on the cancel-aware
// machine) or unsupported (cancel on the canonical machine).
type flow struct {
	machine   string
	initial   string
	waiting   string // the state a run waits for a slot in
	running   string
	completed string // the state complete leads to
	cancelRq  string // cancel_requested, cancel-aware machine only
	parked    []string
	states    []string // every state of the machine

	admit, start, stepDone, complete, fail, timeOut lifecycle.Event
	cancel, requestCancel                           lifecycle.Event
	awaitApproval, approve, reject                  lifecycle.Event
	waitExternal, deliver                           lifecycle.Event

	fire     func(ctx context.Context, r *lifecycle.RunStatus, e lifecycle.Event, a lifecycle.Actor) error
	terminal func(string) bool
	isState  func(string) bool
	check    func(from, to string) error
	// target is where event leads from a state (guards aside: the run
	// machines guard no edge a runner's end takes).
	target func(from string, e lifecycle.Event) (string, bool)
}

func flowOf[S ~string](m *lifecycle.Machine[S, lifecycle.Stateful]) flow {
	var states []string
	for _, s := range m.States() {
		states = append(states, string(s))
	}
	return flow{
		machine: m.Name(),
		initial: string(m.Initial()),
		states:  states,
		fire: func(ctx context.Context, r *lifecycle.RunStatus, e lifecycle.Event, a lifecycle.Actor) error {
			_, err := m.Fire(ctx, r, e, a)
			return err
		},
		terminal: func(s string) bool { return m.IsTerminal(S(s)) },
		isState:  func(s string) bool { return m.IsState(S(s)) },
		check:    func(from, to string) error { return m.Check(S(from), S(to)) },
		target: func(from string, e lifecycle.Event) (string, bool) {
			for _, t := range m.Transitions() {
				if string(t.From) == from && t.Event == e {
					return string(t.To), true
				}
			}
			return "", false
		},
	}
}

func flowFor(machine string) (flow, bool) {
	switch machine {
	case "", lifecycle.MachineCanonical:
		f := flowOf(lifecycle.CanonicalRun())
		f.waiting, f.running, f.completed = string(lifecycle.RunQueued), string(lifecycle.RunRunning), string(lifecycle.RunCompleted)
		f.admit, f.start, f.stepDone = lifecycle.EventAdmit, lifecycle.EventStart, lifecycle.EventStepCompleted
		f.complete, f.fail, f.timeOut = lifecycle.EventComplete, lifecycle.EventFail, lifecycle.EventFail
		return f, true
	case lifecycle.MachineCancelable:
		f := flowOf(lifecycle.CancelableRun())
		f.waiting, f.running, f.completed = string(lifecycle.CancelableQueued), string(lifecycle.CancelableRunning), string(lifecycle.CancelableSucceeded)
		f.cancelRq = string(lifecycle.CancelableCancelRequested)
		f.start, f.complete, f.fail, f.timeOut = lifecycle.EventStart, lifecycle.EventSucceed, lifecycle.EventFail, lifecycle.EventTimeOut
		f.cancel, f.requestCancel = lifecycle.EventCancel, lifecycle.EventRequestCancel
		return f, true
	case lifecycle.MachineApproval:
		f := flowOf(lifecycle.ApprovalRun())
		f.waiting, f.running, f.completed = string(lifecycle.ApprovalPending), string(lifecycle.ApprovalRunning), string(lifecycle.ApprovalCompleted)
		f.parked = []string{string(lifecycle.ApprovalAwaitingApproval), string(lifecycle.ApprovalWaitingExternal)}
		f.start, f.complete, f.fail, f.timeOut = lifecycle.EventStart, lifecycle.EventComplete, lifecycle.EventFail, lifecycle.EventFail
		f.cancel = lifecycle.EventCancel
		f.awaitApproval, f.approve, f.reject = lifecycle.EventAwaitApproval, lifecycle.EventApprove, lifecycle.EventReject
		f.waitExternal, f.deliver = lifecycle.EventWaitExternal, lifecycle.EventDeliver
		return f, true
	}
	return flow{}, false
}

// executing tells whether a run in state s is being (or should be) executed.
func (f *flow) executing(s string) bool {
	return s == f.running || (f.cancelRq != "" && s == f.cancelRq)
}
