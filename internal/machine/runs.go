package machine

import (
	"sync"

	"github.com/runconveyor/conveyor/lifecycle"
)

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
	// CancelableCompensating is an extension: the completed steps are
	// being undone before the run ends canceled or failed.
	CancelableCompensating CancelableRunState = "compensating"
)

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
	// ApprovalCompensating is an extension: the completed steps are being
	// undone before the run ends cancelled or failed.
	ApprovalCompensating ApprovalRunState = "compensating"
)

// runStates lists the canonical run states in lifecycle order.
func runStates() []RunState {
	return []RunState{RunRequested, RunQueued, RunRunning, RunCompleted, RunFailed}
}

// statusOf and setStatus are the state accessors of the run machines,
// over a run's status.json.
func statusOf[S ~string](d *lifecycle.RunStatus) S     { return S(d.Status) }
func setStatus[S ~string](d *lifecycle.RunStatus, s S) { d.Status = string(s) }

// CanonicalRun is the canonical run machine (docs/spec.md#canonical-run):
// requested → queued → running → completed | failed, with running → running
// for a step update. The gateway (the platform's Worker) creates a run in
// requested; the orchestration layer makes every move after that.
//
// Extensions (docs/spec.md#extensions): requested → failed and queued → failed, for a run
// that can never start (orchestration unavailable, run timeout while queued).
func CanonicalRun() *Machine[RunState, *lifecycle.RunStatus] { return canonicalRun() }

var canonicalRun = sync.OnceValue(func() *Machine[RunState, *lifecycle.RunStatus] {
	orch := []lifecycle.Actor{lifecycle.ActorOrchestration}
	return MustNew(Definition[RunState, *lifecycle.RunStatus]{
		Name:     lifecycle.MachineCanonical,
		Initial:  RunRequested,
		States:   runStates(),
		Terminal: []RunState{RunCompleted, RunFailed},
		Transitions: []Transition[RunState, *lifecycle.RunStatus]{
			{From: RunRequested, To: RunQueued, Event: EventAdmit, Actors: orch},
			{From: RunQueued, To: RunRunning, Event: EventStart, Actors: orch},
			{From: RunRunning, To: RunRunning, Event: EventStepCompleted, Actors: orch},
			{From: RunRunning, To: RunCompleted, Event: EventComplete, Actors: orch},
			{From: RunRunning, To: RunFailed, Event: EventFail, Actors: orch},
			{From: RunRequested, To: RunFailed, Event: EventFail, Actors: []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorOrchestration}, Extension: true},
			{From: RunQueued, To: RunFailed, Event: EventFail, Actors: orch, Extension: true},
		},
		GetState: statusOf[RunState],
		SetState: setStatus[RunState],
	})
})

// cancelableRunStates lists the cancel-aware run states in the spec's order.
func cancelableRunStates() []CancelableRunState {
	return []CancelableRunState{CancelableQueued, CancelableRunning, CancelableSucceeded, CancelableFailed,
		CancelableCanceled, CancelableTimeout, CancelableCancelRequested, CancelableCompensating}
}

// CancelableRun is the cancel-aware run machine (docs/spec.md#cancel-aware-run).
// Cancellation is cooperative: the gateway (on the owner's behalf) or the
// orchestration layer asks with request_cancel, and a run whose step finishes
// first may still end succeeded or failed.
//
// Extension (docs/spec.md#extensions): compensating, entered from running or
// cancel_requested when completed steps must be undone, left for canceled
// or failed once every compensation has run.
func CancelableRun() *Machine[CancelableRunState, *lifecycle.RunStatus] { return cancelableRun() }

var cancelableRun = sync.OnceValue(func() *Machine[CancelableRunState, *lifecycle.RunStatus] {
	orch := []lifecycle.Actor{lifecycle.ActorOrchestration}
	canceller := []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorOrchestration}
	return MustNew(Definition[CancelableRunState, *lifecycle.RunStatus]{
		Name:     lifecycle.MachineCancelable,
		Initial:  CancelableQueued,
		States:   cancelableRunStates(),
		Terminal: []CancelableRunState{CancelableSucceeded, CancelableFailed, CancelableCanceled, CancelableTimeout},
		Transitions: []Transition[CancelableRunState, *lifecycle.RunStatus]{
			{From: CancelableQueued, To: CancelableRunning, Event: EventStart, Actors: orch},
			{From: CancelableQueued, To: CancelableCanceled, Event: EventCancel, Actors: canceller},
			{From: CancelableRunning, To: CancelableSucceeded, Event: EventSucceed, Actors: orch},
			{From: CancelableRunning, To: CancelableFailed, Event: EventFail, Actors: orch},
			{From: CancelableRunning, To: CancelableTimeout, Event: EventTimeOut, Actors: orch},
			{From: CancelableRunning, To: CancelableCancelRequested, Event: EventRequestCancel, Actors: canceller},
			{From: CancelableCancelRequested, To: CancelableCanceled, Event: EventCancel, Actors: orch},
			{From: CancelableCancelRequested, To: CancelableSucceeded, Event: EventSucceed, Actors: orch},
			{From: CancelableCancelRequested, To: CancelableFailed, Event: EventFail, Actors: orch},
			{From: CancelableRunning, To: CancelableCompensating, Event: EventCompensate, Actors: orch, Extension: true},
			{From: CancelableCancelRequested, To: CancelableCompensating, Event: EventCompensate, Actors: orch, Extension: true},
			{From: CancelableCompensating, To: CancelableCanceled, Event: EventCancel, Actors: orch, Extension: true},
			{From: CancelableCompensating, To: CancelableFailed, Event: EventFail, Actors: orch, Extension: true},
		},
		GetState: statusOf[CancelableRunState],
		SetState: setStatus[CancelableRunState],
	})
})

// approvalRunStates lists the approval run states in the spec's order.
func approvalRunStates() []ApprovalRunState {
	return []ApprovalRunState{ApprovalPending, ApprovalRunning, ApprovalAwaitingApproval, ApprovalWaitingExternal,
		ApprovalCompleted, ApprovalFailed, ApprovalCancelled, ApprovalCompensating}
}

// ApprovalRun is the approval run machine (docs/spec.md#approval-run): a run may park at an
// approval gate or wait for an external event. The orchestration layer makes
// every move; the gateway may also make the ones an owner or a webhook
// causes: cancel, approve (→ running, or → completed when the gate was the
// last step), reject (→ failed) and deliver (the external event arrived).
//
// Extension (docs/spec.md#extensions): compensating, entered from running or
// a wait when completed steps must be undone (the gateway's cancel of a
// parked run goes there), left for cancelled or failed by the
// orchestration layer once every compensation has run.
func ApprovalRun() *Machine[ApprovalRunState, *lifecycle.RunStatus] { return approvalRun() }

var approvalRun = sync.OnceValue(func() *Machine[ApprovalRunState, *lifecycle.RunStatus] {
	orch := []lifecycle.Actor{lifecycle.ActorOrchestration}
	both := []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorOrchestration}
	return MustNew(Definition[ApprovalRunState, *lifecycle.RunStatus]{
		Name:     lifecycle.MachineApproval,
		Initial:  ApprovalPending,
		States:   approvalRunStates(),
		Terminal: []ApprovalRunState{ApprovalCompleted, ApprovalFailed, ApprovalCancelled},
		Transitions: []Transition[ApprovalRunState, *lifecycle.RunStatus]{
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
			{From: ApprovalRunning, To: ApprovalCompensating, Event: EventCompensate, Actors: both, Extension: true},
			{From: ApprovalAwaitingApproval, To: ApprovalCompensating, Event: EventCompensate, Actors: both, Extension: true},
			{From: ApprovalWaitingExternal, To: ApprovalCompensating, Event: EventCompensate, Actors: both, Extension: true},
			{From: ApprovalCompensating, To: ApprovalCancelled, Event: EventCancel, Actors: orch, Extension: true},
			{From: ApprovalCompensating, To: ApprovalFailed, Event: EventFail, Actors: orch, Extension: true},
		},
		GetState: statusOf[ApprovalRunState],
		SetState: setStatus[ApprovalRunState],
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
func RunStep() *Machine[lifecycle.StepState, *lifecycle.StepRecord] { return runStep() }

var runStep = sync.OnceValue(func() *Machine[lifecycle.StepState, *lifecycle.StepRecord] {
	orch := []lifecycle.Actor{lifecycle.ActorOrchestration}
	return MustNew(Definition[lifecycle.StepState, *lifecycle.StepRecord]{
		Name:     "run-step",
		Initial:  lifecycle.StepPending,
		States:   stepStates(),
		Terminal: []lifecycle.StepState{lifecycle.StepCompleted, lifecycle.StepFailed, lifecycle.StepSkipped},
		Transitions: []Transition[lifecycle.StepState, *lifecycle.StepRecord]{
			{From: lifecycle.StepPending, To: lifecycle.StepRunning, Event: EventStart, Actors: orch},
			{From: lifecycle.StepPending, To: lifecycle.StepSkipped, Event: EventSkip, Actors: orch},
			{From: lifecycle.StepRunning, To: lifecycle.StepCompleted, Event: EventComplete, Actors: orch},
			{From: lifecycle.StepRunning, To: lifecycle.StepFailed, Event: EventFail, Actors: orch},
		},
		GetState: func(r *lifecycle.StepRecord) lifecycle.StepState { return r.Status },
		SetState: func(r *lifecycle.StepRecord, s lifecycle.StepState) { r.Status = s },
	})
})
