package lifecycle

// Names of the run machines, as a run's status.json gives them in its
// machine field ("" is the canonical one).
const (
	MachineCanonical  = "canonical-run"
	MachineCancelable = "cancelable-run"
	MachineApproval   = "approval-run"
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
)

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

// runTerminal lists the terminal states of each run machine by name. The
// machines' own tables say the same (a test of theirs compares), so a
// reader with no machine, the Go client, can tell a finished run.
var runTerminal = map[string][]string{
	MachineCanonical:  {string(RunCompleted), string(RunFailed)},
	MachineCancelable: {string(CancelableSucceeded), string(CancelableFailed), string(CancelableCanceled), string(CancelableTimeout)},
	MachineApproval:   {string(ApprovalCompleted), string(ApprovalFailed), string(ApprovalCancelled)},
}

// RunFinished tells whether status is a terminal state of the run machine
// named machine (a RunStatus's Machine; "" is the canonical one). An
// unknown machine or state is not finished: what cannot be judged is kept.
func RunFinished(machine, status string) bool {
	if machine == "" {
		machine = MachineCanonical
	}
	for _, s := range runTerminal[machine] {
		if s == status {
			return true
		}
	}
	return false
}
