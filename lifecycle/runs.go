package lifecycle

import "sync"

// Names of the run machines, as their Spec and errors give them.
const (
	MachineCanonical  = "canonical-run"
	MachineCancelable = "cancelable-run"
	MachineApproval   = "approval-run"
)

// Stateful is a record that keeps its state as a string: the record the
// run and run-step machines move. The run package's status and step
// records are Stateful, and so may be a user's own records, so these
// machines know no record type of their own.
type Stateful interface {
	State() string
	SetState(string)
}

// RunState is a state of the canonical run machine (docs/spec.md#canonical-run).
type RunState string

// States of the canonical run machine.
const (
	RunRequested RunState = "requested"
	RunQueued    RunState = "queued"
	RunRunning   RunState = "running"
	RunCompleted RunState = "completed"
	RunFailed    RunState = "failed"
)

// runStates lists the canonical run states in lifecycle order.
func runStates() []RunState {
	return []RunState{RunRequested, RunQueued, RunRunning, RunCompleted, RunFailed}
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
func CanonicalRun() *Machine[RunState, Stateful] { return canonicalRun() }

var canonicalRun = sync.OnceValue(func() *Machine[RunState, Stateful] {
	orch := []Actor{ActorOrchestration}
	return MustNew(Definition[RunState, Stateful]{
		Name:     MachineCanonical,
		Initial:  RunRequested,
		States:   runStates(),
		Terminal: []RunState{RunCompleted, RunFailed},
		Transitions: []Transition[RunState, Stateful]{
			{From: RunRequested, To: RunQueued, Event: EventAdmit, Actors: orch},
			{From: RunQueued, To: RunRunning, Event: EventStart, Actors: orch},
			{From: RunRunning, To: RunRunning, Event: EventStepCompleted, Actors: orch},
			{From: RunRunning, To: RunCompleted, Event: EventComplete, Actors: orch},
			{From: RunRunning, To: RunFailed, Event: EventFail, Actors: orch},
			{From: RunRequested, To: RunFailed, Event: EventFail, Actors: []Actor{ActorGateway, ActorOrchestration}, Extension: true},
			{From: RunQueued, To: RunFailed, Event: EventFail, Actors: orch, Extension: true},
		},
		GetState: stateOf[RunState],
		SetState: setState[RunState],
	})
})

// CancelableRunState is a state of the cancel-aware run machine
// (docs/spec.md#cancel-aware-run).
type CancelableRunState string

// States of the cancel-aware run machine.
const (
	CancelableQueued          CancelableRunState = "queued"
	CancelableRunning         CancelableRunState = "running"
	CancelableSucceeded       CancelableRunState = "succeeded"
	CancelableFailed          CancelableRunState = "failed"
	CancelableCanceled        CancelableRunState = "canceled"
	CancelableTimeout         CancelableRunState = "timeout"
	CancelableCancelRequested CancelableRunState = "cancel_requested"
)

// cancelableRunStates lists the cancel-aware run states in the spec's order.
func cancelableRunStates() []CancelableRunState {
	return []CancelableRunState{CancelableQueued, CancelableRunning, CancelableSucceeded, CancelableFailed,
		CancelableCanceled, CancelableTimeout, CancelableCancelRequested}
}

// CancelableRun is the cancel-aware run machine (docs/spec.md#cancel-aware-run).
// Cancellation is cooperative: the gateway (on the owner's behalf) or the
// orchestration layer asks with request_cancel, and a run whose step finishes
// first may still end succeeded or failed.
func CancelableRun() *Machine[CancelableRunState, Stateful] { return cancelableRun() }

var cancelableRun = sync.OnceValue(func() *Machine[CancelableRunState, Stateful] {
	orch := []Actor{ActorOrchestration}
	canceller := []Actor{ActorGateway, ActorOrchestration}
	return MustNew(Definition[CancelableRunState, Stateful]{
		Name:     MachineCancelable,
		Initial:  CancelableQueued,
		States:   cancelableRunStates(),
		Terminal: []CancelableRunState{CancelableSucceeded, CancelableFailed, CancelableCanceled, CancelableTimeout},
		Transitions: []Transition[CancelableRunState, Stateful]{
			{From: CancelableQueued, To: CancelableRunning, Event: EventStart, Actors: orch},
			{From: CancelableQueued, To: CancelableCanceled, Event: EventCancel, Actors: canceller},
			{From: CancelableRunning, To: CancelableSucceeded, Event: EventSucceed, Actors: orch},
			{From: CancelableRunning, To: CancelableFailed, Event: EventFail, Actors: orch},
			{From: CancelableRunning, To: CancelableTimeout, Event: EventTimeOut, Actors: orch},
			{From: CancelableRunning, To: CancelableCancelRequested, Event: EventRequestCancel, Actors: canceller},
			{From: CancelableCancelRequested, To: CancelableCanceled, Event: EventCancel, Actors: orch},
			{From: CancelableCancelRequested, To: CancelableSucceeded, Event: EventSucceed, Actors: orch},
			{From: CancelableCancelRequested, To: CancelableFailed, Event: EventFail, Actors: orch},
		},
		GetState: stateOf[CancelableRunState],
		SetState: setState[CancelableRunState],
	})
})

// ApprovalRunState is a state of the approval run machine (docs/spec.md#approval-run).
type ApprovalRunState string

// States of the approval run machine.
const (
	ApprovalPending          ApprovalRunState = "pending"
	ApprovalRunning          ApprovalRunState = "running"
	ApprovalAwaitingApproval ApprovalRunState = "awaiting_approval"
	ApprovalWaitingExternal  ApprovalRunState = "waiting_external"
	ApprovalCompleted        ApprovalRunState = "completed"
	ApprovalFailed           ApprovalRunState = "failed"
	ApprovalCancelled        ApprovalRunState = "cancelled"
)

// approvalRunStates lists the approval run states in the spec's order.
func approvalRunStates() []ApprovalRunState {
	return []ApprovalRunState{ApprovalPending, ApprovalRunning, ApprovalAwaitingApproval, ApprovalWaitingExternal,
		ApprovalCompleted, ApprovalFailed, ApprovalCancelled}
}

// ApprovalRun is the approval run machine (docs/spec.md#approval-run): a run may park at an
// approval gate or wait for an external event. The orchestration layer makes
// every move; the gateway may also make the ones an owner or a webhook
// causes: cancel, approve (→ running, or → completed when the gate was the
// last step), reject (→ failed) and deliver (the external event arrived).
func ApprovalRun() *Machine[ApprovalRunState, Stateful] { return approvalRun() }

var approvalRun = sync.OnceValue(func() *Machine[ApprovalRunState, Stateful] {
	orch := []Actor{ActorOrchestration}
	both := []Actor{ActorGateway, ActorOrchestration}
	return MustNew(Definition[ApprovalRunState, Stateful]{
		Name:     MachineApproval,
		Initial:  ApprovalPending,
		States:   approvalRunStates(),
		Terminal: []ApprovalRunState{ApprovalCompleted, ApprovalFailed, ApprovalCancelled},
		Transitions: []Transition[ApprovalRunState, Stateful]{
			{From: ApprovalPending, To: ApprovalRunning, Event: EventStart, Actors: orch},
			{From: ApprovalPending, To: ApprovalCancelled, Event: EventCancel, Actors: both},
			{From: ApprovalPending, To: ApprovalFailed, Event: EventFail, Actors: orch},
			{From: ApprovalRunning, To: ApprovalCompleted, Event: EventComplete, Actors: orch},
			{From: ApprovalRunning, To: ApprovalFailed, Event: EventFail, Actors: orch},
			{From: ApprovalRunning, To: ApprovalCancelled, Event: EventCancel, Actors: both},
			{From: ApprovalRunning, To: ApprovalAwaitingApproval, Event: EventAwaitApproval, Actors: orch},
			{From: ApprovalRunning, To: ApprovalWaitingExternal, Event: EventWaitExternal, Actors: orch},
			{From: ApprovalAwaitingApproval, To: ApprovalRunning, Event: EventApprove, Actors: both},
			{From: ApprovalAwaitingApproval, To: ApprovalCompleted, Event: EventComplete, Actors: both},
			{From: ApprovalAwaitingApproval, To: ApprovalFailed, Event: EventReject, Actors: both},
			{From: ApprovalAwaitingApproval, To: ApprovalCancelled, Event: EventCancel, Actors: both},
			{From: ApprovalWaitingExternal, To: ApprovalRunning, Event: EventDeliver, Actors: both},
			{From: ApprovalWaitingExternal, To: ApprovalCompleted, Event: EventComplete, Actors: both},
			{From: ApprovalWaitingExternal, To: ApprovalFailed, Event: EventFail, Actors: orch},
			{From: ApprovalWaitingExternal, To: ApprovalCancelled, Event: EventCancel, Actors: both},
		},
		GetState: stateOf[ApprovalRunState],
		SetState: setState[ApprovalRunState],
	})
})

// StepState is a state of a run step (docs/spec.md#run-step).
type StepState string

// States of the run-step machine.
const (
	StepPending   StepState = "pending"
	StepRunning   StepState = "running"
	StepCompleted StepState = "completed"
	StepFailed    StepState = "failed"
	StepSkipped   StepState = "skipped"
)

// stepStates lists the run-step states in the spec's order.
func stepStates() []StepState {
	return []StepState{StepPending, StepRunning, StepCompleted, StepFailed, StepSkipped}
}

// RunStep is the run-step machine (docs/spec.md#run-step). The platform named the states only; the
// moves are Conveyor's: a step starts and then completes or fails (retries
// happen inside running), or is skipped without running (a resumed run
// reusing a checkpoint). Only the orchestration layer writes step files.
func RunStep() *Machine[StepState, Stateful] { return runStep() }

var runStep = sync.OnceValue(func() *Machine[StepState, Stateful] {
	orch := []Actor{ActorOrchestration}
	return MustNew(Definition[StepState, Stateful]{
		Name:     "run-step",
		Initial:  StepPending,
		States:   stepStates(),
		Terminal: []StepState{StepCompleted, StepFailed, StepSkipped},
		Transitions: []Transition[StepState, Stateful]{
			{From: StepPending, To: StepRunning, Event: EventStart, Actors: orch},
			{From: StepPending, To: StepSkipped, Event: EventSkip, Actors: orch},
			{From: StepRunning, To: StepCompleted, Event: EventComplete, Actors: orch},
			{From: StepRunning, To: StepFailed, Event: EventFail, Actors: orch},
		},
		GetState: stateOf[StepState],
		SetState: setState[StepState],
	})
})

// RunFinished tells whether status is a terminal state of the run machine
// named machine (a RunStatus's Machine; "" is the canonical one). An
// unknown machine or state is not finished: what cannot be judged is kept.
func RunFinished(machine, status string) bool {
	switch machine {
	case "", MachineCanonical:
		return CanonicalRun().IsTerminal(RunState(status))
	case MachineCancelable:
		return CancelableRun().IsTerminal(CancelableRunState(status))
	case MachineApproval:
		return ApprovalRun().IsTerminal(ApprovalRunState(status))
	}
	return false
}
