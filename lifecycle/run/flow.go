package run

import (
	"context"

	xmachine "github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

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
	// compensating is where completed steps are undone before the end;
	// "" on the canonical machine, which does not compensate.
	compensating string
	parked       []string
	states       []string // every state of the machine

	admit, start, stepDone, complete, fail, timeOut lifecycle.Event
	cancel, requestCancel                           lifecycle.Event
	awaitApproval, approve, reject                  lifecycle.Event
	waitExternal, deliver                           lifecycle.Event
	compensate                                      lifecycle.Event

	fire     func(ctx context.Context, r *lifecycle.RunStatus, e lifecycle.Event, a lifecycle.Actor) error
	terminal func(string) bool
	isState  func(string) bool
	check    func(from, to string) error
	// target is where event leads from a state (guards aside: the run
	// machines guard no edge a runner's end takes).
	target func(from string, e lifecycle.Event) (string, bool)
}

func flowOf[S ~string](m *xmachine.Machine[S, *lifecycle.RunStatus]) flow {
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
		f := flowOf(xmachine.CanonicalRun())
		f.waiting, f.running, f.completed = string(xmachine.RunQueued), string(xmachine.RunRunning), string(xmachine.RunCompleted)
		f.admit, f.start, f.stepDone = xmachine.EventAdmit, xmachine.EventStart, xmachine.EventStepCompleted
		f.complete, f.fail, f.timeOut = xmachine.EventComplete, xmachine.EventFail, xmachine.EventFail
		return f, true
	case lifecycle.MachineCancelable:
		f := flowOf(xmachine.CancelableRun())
		f.waiting, f.running, f.completed = string(xmachine.CancelableQueued), string(xmachine.CancelableRunning), string(xmachine.CancelableSucceeded)
		f.cancelRq = string(xmachine.CancelableCancelRequested)
		f.start, f.complete, f.fail, f.timeOut = xmachine.EventStart, xmachine.EventSucceed, xmachine.EventFail, xmachine.EventTimeOut
		f.cancel, f.requestCancel = xmachine.EventCancel, xmachine.EventRequestCancel
		f.compensating, f.compensate = string(xmachine.CancelableCompensating), xmachine.EventCompensate
		return f, true
	case lifecycle.MachineApproval:
		f := flowOf(xmachine.ApprovalRun())
		f.waiting, f.running, f.completed = string(xmachine.ApprovalPending), string(xmachine.ApprovalRunning), string(xmachine.ApprovalCompleted)
		f.parked = []string{string(xmachine.ApprovalAwaitingApproval), string(xmachine.ApprovalWaitingExternal)}
		f.start, f.complete, f.fail, f.timeOut = xmachine.EventStart, xmachine.EventComplete, xmachine.EventFail, xmachine.EventFail
		f.cancel = xmachine.EventCancel
		f.awaitApproval, f.approve, f.reject = xmachine.EventAwaitApproval, xmachine.EventApprove, xmachine.EventReject
		f.waitExternal, f.deliver = xmachine.EventWaitExternal, xmachine.EventDeliver
		f.compensating, f.compensate = string(xmachine.ApprovalCompensating), xmachine.EventCompensate
		return f, true
	}
	return flow{}, false
}

// executing tells whether a run in state s is being (or should be) executed.
func (f *flow) executing(s string) bool {
	return s == f.running || (f.cancelRq != "" && s == f.cancelRq) || (f.compensating != "" && s == f.compensating)
}
