package lifecycle

import "context"

// Names of the run machines, as an Agent selects them.
const (
	MachineCanonical  = "canonical-run"
	MachineCancelable = "cancelable-run"
	MachineApproval   = "approval-run"
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
	parked    []string

	admit, start, stepDone, complete, fail, timeOut Event
	cancel, requestCancel                           Event
	awaitApproval, approve, reject                  Event
	waitExternal, deliver                           Event

	fire     func(ctx context.Context, r *RunStatus, e Event, a Actor) error
	terminal func(string) bool
	isState  func(string) bool
	check    func(from, to string) error
}

func flowOf[S ~string](m *Machine[S, *RunStatus]) flow {
	return flow{
		machine: m.Name(),
		initial: string(m.Initial()),
		fire: func(ctx context.Context, r *RunStatus, e Event, a Actor) error {
			_, err := m.Fire(ctx, r, e, a)
			return err
		},
		terminal: func(s string) bool { return m.IsTerminal(S(s)) },
		isState:  func(s string) bool { return m.IsState(S(s)) },
		check:    func(from, to string) error { return m.Check(S(from), S(to)) },
	}
}

func flowFor(machine string) (flow, bool) {
	switch machine {
	case "", MachineCanonical:
		f := flowOf(CanonicalRun())
		f.waiting, f.running, f.completed = string(RunQueued), string(RunRunning), string(RunCompleted)
		f.admit, f.start, f.stepDone = EventAdmit, EventStart, EventStepCompleted
		f.complete, f.fail, f.timeOut = EventComplete, EventFail, EventFail
		return f, true
	case MachineCancelable:
		f := flowOf(CancelableRun())
		f.waiting, f.running, f.completed = string(CancelableQueued), string(CancelableRunning), string(CancelableSucceeded)
		f.cancelRq = string(CancelableCancelRequested)
		f.start, f.complete, f.fail, f.timeOut = EventStart, EventSucceed, EventFail, EventTimeOut
		f.cancel, f.requestCancel = EventCancel, EventRequestCancel
		return f, true
	case MachineApproval:
		f := flowOf(ApprovalRun())
		f.waiting, f.running, f.completed = string(ApprovalPending), string(ApprovalRunning), string(ApprovalCompleted)
		f.parked = []string{string(ApprovalAwaitingApproval), string(ApprovalWaitingExternal)}
		f.start, f.complete, f.fail, f.timeOut = EventStart, EventComplete, EventFail, EventFail
		f.cancel = EventCancel
		f.awaitApproval, f.approve, f.reject = EventAwaitApproval, EventApprove, EventReject
		f.waitExternal, f.deliver = EventWaitExternal, EventDeliver
		return f, true
	}
	return flow{}, false
}

// executing tells whether a run in state s is being (or should be) executed.
func (f *flow) executing(s string) bool {
	return s == f.running || (f.cancelRq != "" && s == f.cancelRq)
}
