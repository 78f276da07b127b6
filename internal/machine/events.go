package machine

import "github.com/runconveyor/conveyor/lifecycle"

// Events of the run and step machines. One event may lead out of several
// states (EventFail, EventCancel), always to the state its name says.
const (
	EventAdmit         lifecycle.Event = "admit"          // requested → queued: the orchestration layer acknowledged
	EventStart         lifecycle.Event = "start"          // → running: a slot is free
	EventStepCompleted lifecycle.Event = "step_completed" // running → running: a step file was written
	EventComplete      lifecycle.Event = "complete"       // → completed
	EventSucceed       lifecycle.Event = "succeed"        // → succeeded (cancel-aware machine)
	EventFail          lifecycle.Event = "fail"           // → failed
	EventTimeOut       lifecycle.Event = "time_out"       // → timeout (cancel-aware machine)
	EventRequestCancel lifecycle.Event = "request_cancel" // running → cancel_requested
	EventCancel        lifecycle.Event = "cancel"         // → canceled / cancelled
	EventAwaitApproval lifecycle.Event = "await_approval" // running → awaiting_approval
	EventApprove       lifecycle.Event = "approve"        // awaiting_approval → running
	EventReject        lifecycle.Event = "reject"         // awaiting_approval → failed
	EventWaitExternal  lifecycle.Event = "wait_external"  // running → waiting_external
	EventDeliver       lifecycle.Event = "deliver"        // waiting_external → running: the external event arrived
	EventSkip          lifecycle.Event = "skip"           // step pending → skipped
	EventCompensate    lifecycle.Event = "compensate"     // → compensating: undo the completed steps, then end
)
