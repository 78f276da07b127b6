package lifecycle

// Events of the run and step machines. One event may lead out of several
// states (EventFail, EventCancel), always to the state its name says.
const (
	EventAdmit         Event = "admit"          // requested → queued: the orchestration layer acknowledged
	EventStart         Event = "start"          // → running: a slot is free
	EventStepCompleted Event = "step_completed" // running → running: a step file was written
	EventComplete      Event = "complete"       // → completed
	EventSucceed       Event = "succeed"        // → succeeded (cancel-aware machine)
	EventFail          Event = "fail"           // → failed
	EventTimeOut       Event = "time_out"       // → timeout (cancel-aware machine)
	EventRequestCancel Event = "request_cancel" // running → cancel_requested
	EventCancel        Event = "cancel"         // → canceled / cancelled
	EventAwaitApproval Event = "await_approval" // running → awaiting_approval
	EventApprove       Event = "approve"        // awaiting_approval → running
	EventReject        Event = "reject"         // awaiting_approval → failed
	EventWaitExternal  Event = "wait_external"  // running → waiting_external
	EventDeliver       Event = "deliver"        // waiting_external → running: the external event arrived
	EventSkip          Event = "skip"           // step pending → skipped
)
