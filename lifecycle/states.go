package lifecycle

// Names of the run machines, as a run's status.json gives them in its
// machine field ("" is the canonical one).
const (
	MachineCanonical  = "canonical-run"
	MachineCancelable = "cancelable-run"
	MachineApproval   = "approval-run"
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
// reader with no machine, the Go client, can tell a finished run. (The
// states of the run machines are the machines' own: a RunStatus keeps its
// state as a string, docs/spec.md#run-status lists them.)
var runTerminal = map[string][]string{
	MachineCanonical:  {"completed", "failed"},
	MachineCancelable: {"succeeded", "failed", "canceled", "timeout"},
	MachineApproval:   {"completed", "failed", "cancelled"},
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
