package machine

import (
	"sync"

	"github.com/runconveyor/conveyor/lifecycle"
)

// Stateful is a record that keeps its state as a string: the record the
// run and run-step machines move. The run package's status and step
// records are Stateful, and so may be a user's own records, so these
// machines know no record type of their own.
type Stateful interface {
	State() string
	SetState(string)
}

// runStates lists the canonical run states in lifecycle order.
func runStates() []lifecycle.RunState {
	return []lifecycle.RunState{lifecycle.RunRequested, lifecycle.RunQueued, lifecycle.RunRunning, lifecycle.RunCompleted, lifecycle.RunFailed}
}

// stateOf and setState are the state accessors of every machine over
// Stateful records.
func stateOf[S ~string](r Stateful) S     { return S(r.State()) }
func setState[S ~string](r Stateful, s S) { r.SetState(string(s)) }

// CanonicalRun is the canonical run machine (docs/spec.md#canonical-run):
// requested → queued → running → completed | failed, with running → running
// for a step update. The gateway (the platform's Worker) creates a run in
// requested; the orchestration layer makes every move after that.
//
// Extensions (docs/spec.md#extensions): requested → failed and queued → failed, for a run
// that can never start (orchestration unavailable, run timeout while queued).
func CanonicalRun() *Machine[lifecycle.RunState, Stateful] { return canonicalRun() }

var canonicalRun = sync.OnceValue(func() *Machine[lifecycle.RunState, Stateful] {
	orch := []lifecycle.Actor{lifecycle.ActorOrchestration}
	return MustNew(Definition[lifecycle.RunState, Stateful]{
		Name:     lifecycle.MachineCanonical,
		Initial:  lifecycle.RunRequested,
		States:   runStates(),
		Terminal: []lifecycle.RunState{lifecycle.RunCompleted, lifecycle.RunFailed},
		Transitions: []Transition[lifecycle.RunState, Stateful]{
			{From: lifecycle.RunRequested, To: lifecycle.RunQueued, Event: EventAdmit, Actors: orch},
			{From: lifecycle.RunQueued, To: lifecycle.RunRunning, Event: EventStart, Actors: orch},
			{From: lifecycle.RunRunning, To: lifecycle.RunRunning, Event: EventStepCompleted, Actors: orch},
			{From: lifecycle.RunRunning, To: lifecycle.RunCompleted, Event: EventComplete, Actors: orch},
			{From: lifecycle.RunRunning, To: lifecycle.RunFailed, Event: EventFail, Actors: orch},
			{From: lifecycle.RunRequested, To: lifecycle.RunFailed, Event: EventFail, Actors: []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorOrchestration}, Extension: true},
			{From: lifecycle.RunQueued, To: lifecycle.RunFailed, Event: EventFail, Actors: orch, Extension: true},
		},
		GetState: stateOf[lifecycle.RunState],
		SetState: setState[lifecycle.RunState],
	})
})

// cancelableRunStates lists the cancel-aware run states in the spec's order.
func cancelableRunStates() []lifecycle.CancelableRunState {
	return []lifecycle.CancelableRunState{lifecycle.CancelableQueued, lifecycle.CancelableRunning, lifecycle.CancelableSucceeded, lifecycle.CancelableFailed,
		lifecycle.CancelableCanceled, lifecycle.CancelableTimeout, lifecycle.CancelableCancelRequested}
}

// CancelableRun is the cancel-aware run machine (docs/spec.md#cancel-aware-run).
// Cancellation is cooperative: the gateway (on the owner's behalf) or the
// orchestration layer asks with request_cancel, and a run whose step finishes
// first may still end succeeded or failed.
func CancelableRun() *Machine[lifecycle.CancelableRunState, Stateful] { return cancelableRun() }

var cancelableRun = sync.OnceValue(func() *Machine[lifecycle.CancelableRunState, Stateful] {
	orch := []lifecycle.Actor{lifecycle.ActorOrchestration}
	canceller := []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorOrchestration}
	return MustNew(Definition[lifecycle.CancelableRunState, Stateful]{
		Name:     lifecycle.MachineCancelable,
		Initial:  lifecycle.CancelableQueued,
		States:   cancelableRunStates(),
		Terminal: []lifecycle.CancelableRunState{lifecycle.CancelableSucceeded, lifecycle.CancelableFailed, lifecycle.CancelableCanceled, lifecycle.CancelableTimeout},
		Transitions: []Transition[lifecycle.CancelableRunState, Stateful]{
			{From: lifecycle.CancelableQueued, To: lifecycle.CancelableRunning, Event: EventStart, Actors: orch},
			{From: lifecycle.CancelableQueued, To: lifecycle.CancelableCanceled, Event: EventCancel, Actors: canceller},
			{From: lifecycle.CancelableRunning, To: lifecycle.CancelableSucceeded, Event: EventSucceed, Actors: orch},
			{From: lifecycle.CancelableRunning, To: lifecycle.CancelableFailed, Event: EventFail, Actors: orch},
			{From: lifecycle.CancelableRunning, To: lifecycle.CancelableTimeout, Event: EventTimeOut, Actors: orch},
			{From: lifecycle.CancelableRunning, To: lifecycle.CancelableCancelRequested, Event: EventRequestCancel, Actors: canceller},
			{From: lifecycle.CancelableCancelRequested, To: lifecycle.CancelableCanceled, Event: EventCancel, Actors: orch},
			{From: lifecycle.CancelableCancelRequested, To: lifecycle.CancelableSucceeded, Event: EventSucceed, Actors: orch},
			{From: lifecycle.CancelableCancelRequested, To: lifecycle.CancelableFailed, Event: EventFail, Actors: orch},
		},
		GetState: stateOf[lifecycle.CancelableRunState],
		SetState: setState[lifecycle.CancelableRunState],
	})
})

// approvalRunStates lists the approval run states in the spec's order.
func approvalRunStates() []lifecycle.ApprovalRunState {
	return []lifecycle.ApprovalRunState{lifecycle.ApprovalPending, lifecycle.ApprovalRunning, lifecycle.ApprovalAwaitingApproval, lifecycle.ApprovalWaitingExternal,
		lifecycle.ApprovalCompleted, lifecycle.ApprovalFailed, lifecycle.ApprovalCancelled}
}

// ApprovalRun is the approval run machine (docs/spec.md#approval-run): a run may park at an
// approval gate or wait for an external event. The orchestration layer makes
// every move; the gateway may also make the ones an owner or a webhook
// causes: cancel, approve (→ running, or → completed when the gate was the
// last step), reject (→ failed) and deliver (the external event arrived).
func ApprovalRun() *Machine[lifecycle.ApprovalRunState, Stateful] { return approvalRun() }

var approvalRun = sync.OnceValue(func() *Machine[lifecycle.ApprovalRunState, Stateful] {
	orch := []lifecycle.Actor{lifecycle.ActorOrchestration}
	both := []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorOrchestration}
	return MustNew(Definition[lifecycle.ApprovalRunState, Stateful]{
		Name:     lifecycle.MachineApproval,
		Initial:  lifecycle.ApprovalPending,
		States:   approvalRunStates(),
		Terminal: []lifecycle.ApprovalRunState{lifecycle.ApprovalCompleted, lifecycle.ApprovalFailed, lifecycle.ApprovalCancelled},
		Transitions: []Transition[lifecycle.ApprovalRunState, Stateful]{
			{From: lifecycle.ApprovalPending, To: lifecycle.ApprovalRunning, Event: EventStart, Actors: orch},
			{From: lifecycle.ApprovalPending, To: lifecycle.ApprovalCancelled, Event: EventCancel, Actors: both},
			{From: lifecycle.ApprovalPending, To: lifecycle.ApprovalFailed, Event: EventFail, Actors: orch},
			{From: lifecycle.ApprovalRunning, To: lifecycle.ApprovalCompleted, Event: EventComplete, Actors: orch},
			{From: lifecycle.ApprovalRunning, To: lifecycle.ApprovalFailed, Event: EventFail, Actors: orch},
			{From: lifecycle.ApprovalRunning, To: lifecycle.ApprovalCancelled, Event: EventCancel, Actors: both},
			{From: lifecycle.ApprovalRunning, To: lifecycle.ApprovalAwaitingApproval, Event: EventAwaitApproval, Actors: orch},
			{From: lifecycle.ApprovalRunning, To: lifecycle.ApprovalWaitingExternal, Event: EventWaitExternal, Actors: orch},
			{From: lifecycle.ApprovalAwaitingApproval, To: lifecycle.ApprovalRunning, Event: EventApprove, Actors: both},
			{From: lifecycle.ApprovalAwaitingApproval, To: lifecycle.ApprovalCompleted, Event: EventComplete, Actors: both},
			{From: lifecycle.ApprovalAwaitingApproval, To: lifecycle.ApprovalFailed, Event: EventReject, Actors: both},
			{From: lifecycle.ApprovalAwaitingApproval, To: lifecycle.ApprovalCancelled, Event: EventCancel, Actors: both},
			{From: lifecycle.ApprovalWaitingExternal, To: lifecycle.ApprovalRunning, Event: EventDeliver, Actors: both},
			{From: lifecycle.ApprovalWaitingExternal, To: lifecycle.ApprovalCompleted, Event: EventComplete, Actors: both},
			{From: lifecycle.ApprovalWaitingExternal, To: lifecycle.ApprovalFailed, Event: EventFail, Actors: orch},
			{From: lifecycle.ApprovalWaitingExternal, To: lifecycle.ApprovalCancelled, Event: EventCancel, Actors: both},
		},
		GetState: stateOf[lifecycle.ApprovalRunState],
		SetState: setState[lifecycle.ApprovalRunState],
	})
})

// stepStates lists the run-step states in the spec's order.
func stepStates() []lifecycle.StepState {
	return []lifecycle.StepState{lifecycle.StepPending, lifecycle.StepRunning, lifecycle.StepCompleted, lifecycle.StepFailed, lifecycle.StepSkipped}
}

// RunStep is the run-step machine (docs/spec.md#run-step). The platform named the states only; the
// moves are Conveyor's: a step starts and then completes or fails (retries
// happen inside running), or is skipped without running (a resumed run
// reusing a checkpoint). Only the orchestration layer writes step files.
func RunStep() *Machine[lifecycle.StepState, Stateful] { return runStep() }

var runStep = sync.OnceValue(func() *Machine[lifecycle.StepState, Stateful] {
	orch := []lifecycle.Actor{lifecycle.ActorOrchestration}
	return MustNew(Definition[lifecycle.StepState, Stateful]{
		Name:     "run-step",
		Initial:  lifecycle.StepPending,
		States:   stepStates(),
		Terminal: []lifecycle.StepState{lifecycle.StepCompleted, lifecycle.StepFailed, lifecycle.StepSkipped},
		Transitions: []Transition[lifecycle.StepState, Stateful]{
			{From: lifecycle.StepPending, To: lifecycle.StepRunning, Event: EventStart, Actors: orch},
			{From: lifecycle.StepPending, To: lifecycle.StepSkipped, Event: EventSkip, Actors: orch},
			{From: lifecycle.StepRunning, To: lifecycle.StepCompleted, Event: EventComplete, Actors: orch},
			{From: lifecycle.StepRunning, To: lifecycle.StepFailed, Event: EventFail, Actors: orch},
		},
		GetState: stateOf[lifecycle.StepState],
		SetState: setState[lifecycle.StepState],
	})
})
