package machine

import (
	"sync"

	"github.com/runconveyor/conveyor/lifecycle"
)

// JobStates lists the job states in pipeline order.
func JobStates() []lifecycle.JobState {
	return []lifecycle.JobState{lifecycle.JobPending, lifecycle.JobQueued, lifecycle.JobContextAssembly, lifecycle.JobNotebookLMCall, lifecycle.JobArtifactWrite,
		lifecycle.JobComplete, lifecycle.JobRetryBackoff, lifecycle.JobFailed, lifecycle.JobDead}
}

// Job-machine events.
const (
	EventValidate       lifecycle.Event = "validate"        // PENDING → QUEUED
	EventPickup         lifecycle.Event = "pickup"          // QUEUED → CONTEXT_ASSEMBLY
	EventSnapshotReady  lifecycle.Event = "snapshot_ready"  // CONTEXT_ASSEMBLY → NOTEBOOKLM_CALL
	EventResponseOK     lifecycle.Event = "response_ok"     // NOTEBOOKLM_CALL → ARTIFACT_WRITE
	EventCommit         lifecycle.Event = "commit"          // ARTIFACT_WRITE → COMPLETE
	EventRetryableError lifecycle.Event = "retryable_error" // a pipeline state → RETRY_BACKOFF
	EventBackoffElapsed lifecycle.Event = "backoff_elapsed" // RETRY_BACKOFF → QUEUED or FAILED, by guard
	EventBury           lifecycle.Event = "bury"            // FAILED → DEAD
	EventRequeue        lifecycle.Event = "requeue"         // FAILED or DEAD → QUEUED (operator)
	EventSnooze         lifecycle.Event = "snooze"          // RUNNING → QUEUED, to run again later (general machine only)
)

// JobMachine is the job machine (docs/spec.md#job-lifecycle). The orchestration layer makes
// every automatic move; only an admin requeues. RETRY_BACKOFF leaves by one
// event, backoff_elapsed, whose guards send the job back to QUEUED while
// attempts are left and to FAILED once they are exhausted, or at once when
// its error was permanent (error_code PERMANENT, see Permanent).
//
// Extension (docs/spec.md#extensions): DEAD → QUEUED, the operator's requeue of a dead
// job (invariant F2); it is the only move out of a terminal state. The
// table has no cancel: a job of the three NLM types cannot be cancelled
// (GeneralJobMachine, the machine of the user's job types, has it).
func JobMachine() *Machine[lifecycle.JobState, *lifecycle.Job] { return jobMachine() }

var jobMachine = sync.OnceValue(func() *Machine[lifecycle.JobState, *lifecycle.Job] {
	orch := []lifecycle.Actor{lifecycle.ActorOrchestration}
	admin := []lifecycle.Actor{lifecycle.ActorAdmin}
	// Guards on the attempt count: retried while attempt < max_attempts.
	// Extension: a permanent error (Permanent, error_code PERMANENT) takes
	// the FAILED branch whatever attempts are left.
	attemptsLeft, attemptsExhausted := attemptGuards()
	return MustNew(Definition[lifecycle.JobState, *lifecycle.Job]{
		Name:     JobMachineSpecName,
		Initial:  lifecycle.JobPending,
		States:   JobStates(),
		Terminal: []lifecycle.JobState{lifecycle.JobComplete, lifecycle.JobDead},
		Transitions: []Transition[lifecycle.JobState, *lifecycle.Job]{
			{From: lifecycle.JobPending, To: lifecycle.JobQueued, Event: EventValidate, Actors: orch},
			{From: lifecycle.JobQueued, To: lifecycle.JobContextAssembly, Event: EventPickup, Actors: orch},
			{From: lifecycle.JobContextAssembly, To: lifecycle.JobNotebookLMCall, Event: EventSnapshotReady, Actors: orch},
			{From: lifecycle.JobContextAssembly, To: lifecycle.JobRetryBackoff, Event: EventRetryableError, Actors: orch},
			{From: lifecycle.JobNotebookLMCall, To: lifecycle.JobArtifactWrite, Event: EventResponseOK, Actors: orch},
			{From: lifecycle.JobNotebookLMCall, To: lifecycle.JobRetryBackoff, Event: EventRetryableError, Actors: orch},
			{From: lifecycle.JobArtifactWrite, To: lifecycle.JobComplete, Event: EventCommit, Actors: orch},
			{From: lifecycle.JobArtifactWrite, To: lifecycle.JobRetryBackoff, Event: EventRetryableError, Actors: orch},
			{From: lifecycle.JobRetryBackoff, To: lifecycle.JobQueued, Event: EventBackoffElapsed, Actors: orch, Guard: &attemptsLeft},
			{From: lifecycle.JobRetryBackoff, To: lifecycle.JobFailed, Event: EventBackoffElapsed, Actors: orch, Guard: &attemptsExhausted},
			{From: lifecycle.JobFailed, To: lifecycle.JobDead, Event: EventBury, Actors: orch},
			{From: lifecycle.JobFailed, To: lifecycle.JobQueued, Event: EventRequeue, Actors: admin, Requeue: true},
			{From: lifecycle.JobDead, To: lifecycle.JobQueued, Event: EventRequeue, Actors: admin, Requeue: true, Extension: true},
		},
		GetState: func(j *lifecycle.Job) lifecycle.JobState { return j.Status },
		SetState: func(j *lifecycle.Job, s lifecycle.JobState) { j.Status = s },
	})
})
