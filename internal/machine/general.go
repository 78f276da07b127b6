package machine

import (
	"sync"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// GeneralJobStates lists the general job machine's states in pipeline
// order.
func GeneralJobStates() []lifecycle.JobState {
	return []lifecycle.JobState{lifecycle.JobPending, lifecycle.JobQueued, lifecycle.JobRunning,
		lifecycle.JobComplete, lifecycle.JobRetryBackoff, lifecycle.JobFailed, lifecycle.JobDead, lifecycle.JobCancelled}
}

// GeneralJobMachine is the machine a job of a type of the user's runs on
// (an extension, docs/spec.md#extensions: the whole machine is
// Conveyor's, so its moves are not marked one by one): PENDING → QUEUED → RUNNING →
// COMPLETE, the handler's error RUNNING → RETRY_BACKOFF, left by
// backoff_elapsed to QUEUED or, attempts exhausted or the error permanent,
// to FAILED → DEAD; the operator's requeue of FAILED and DEAD; and cancel:
// the operator's of a QUEUED or RETRY_BACKOFF job, at once, and the
// orchestration's of a RUNNING one whose cancel was asked for; and snooze,
// RUNNING → QUEUED, the orchestration's when the handler asks to run again
// later (no failure: the attempt is given back). Its events and guards are the spec machine's where the move is the same: pickup,
// commit (the artifact written, the job COMPLETE), retryable_error,
// backoff_elapsed, bury, requeue.
//
// CANCELLED is terminal, with no way out: a cancelled job is not requeued
// (enqueue it afresh).
func GeneralJobMachine() *Machine[lifecycle.JobState, *lifecycle.Job] { return generalJobMachine() }

var generalJobMachine = sync.OnceValue(func() *Machine[lifecycle.JobState, *lifecycle.Job] {
	orch := []lifecycle.Actor{lifecycle.ActorOrchestration}
	admin := []lifecycle.Actor{lifecycle.ActorAdmin}
	left, exhausted := attemptGuards()
	return MustNew(Definition[lifecycle.JobState, *lifecycle.Job]{
		Name:     lifecycle.JobMachineGeneral,
		Initial:  lifecycle.JobPending,
		States:   GeneralJobStates(),
		Terminal: []lifecycle.JobState{lifecycle.JobComplete, lifecycle.JobDead, lifecycle.JobCancelled},
		Transitions: []Transition[lifecycle.JobState, *lifecycle.Job]{
			{From: lifecycle.JobPending, To: lifecycle.JobQueued, Event: EventValidate, Actors: orch},
			{From: lifecycle.JobQueued, To: lifecycle.JobRunning, Event: EventPickup, Actors: orch},
			{From: lifecycle.JobRunning, To: lifecycle.JobComplete, Event: EventCommit, Actors: orch},
			{From: lifecycle.JobRunning, To: lifecycle.JobRetryBackoff, Event: EventRetryableError, Actors: orch},
			{From: lifecycle.JobRetryBackoff, To: lifecycle.JobQueued, Event: EventBackoffElapsed, Actors: orch, Guard: &left},
			{From: lifecycle.JobRetryBackoff, To: lifecycle.JobFailed, Event: EventBackoffElapsed, Actors: orch, Guard: &exhausted},
			{From: lifecycle.JobFailed, To: lifecycle.JobDead, Event: EventBury, Actors: orch},
			{From: lifecycle.JobFailed, To: lifecycle.JobQueued, Event: EventRequeue, Actors: admin, Requeue: true},
			{From: lifecycle.JobDead, To: lifecycle.JobQueued, Event: EventRequeue, Actors: admin, Requeue: true},
			{From: lifecycle.JobQueued, To: lifecycle.JobCancelled, Event: EventCancel, Actors: admin},
			{From: lifecycle.JobRetryBackoff, To: lifecycle.JobCancelled, Event: EventCancel, Actors: admin},
			{From: lifecycle.JobRunning, To: lifecycle.JobCancelled, Event: EventCancel, Actors: orch},
			{From: lifecycle.JobRunning, To: lifecycle.JobQueued, Event: EventSnooze, Actors: orch},
		},
		GetState: func(j *lifecycle.Job) lifecycle.JobState { return j.Status },
		SetState: func(j *lifecycle.Job, s lifecycle.JobState) { j.Status = s },
	})
})

// attemptGuards are the guards of backoff_elapsed, the same on both job
// machines: retried while attempt < max_attempts; a permanent error
// (error_code PERMANENT, an extension) takes the FAILED branch whatever
// attempts are left.
func attemptGuards() (left, exhausted Guard[*lifecycle.Job]) {
	return Guard[*lifecycle.Job]{
			Name:  "attempt < max_attempts and not PERMANENT",
			Allow: func(j *lifecycle.Job) bool { return j.Attempt < j.MaxAttempts && j.ErrorCode != codes.JobPermanent },
		}, Guard[*lifecycle.Job]{
			Name:  "attempt >= max_attempts or PERMANENT",
			Allow: func(j *lifecycle.Job) bool { return j.Attempt >= j.MaxAttempts || j.ErrorCode == codes.JobPermanent },
		}
}

// JobMachineSpecName is the spec's job machine's name, as a job record's
// machine field gives it ("" too: a record written before the field).
const JobMachineSpecName = "job"

// JobMachineNamed is the job machine of the given name (a job record's
// machine field): the general one for lifecycle.JobMachineGeneral, the
// spec's for "" (a record written before the field) and
// JobMachineSpecName, nil for a name this release does not know.
func JobMachineNamed(name string) *Machine[lifecycle.JobState, *lifecycle.Job] {
	switch name {
	case "", JobMachineSpecName:
		return JobMachine()
	case lifecycle.JobMachineGeneral:
		return GeneralJobMachine()
	}
	return nil
}

// JobMachineForType names the machine a new job of type t runs on: the
// spec's for the three NLM job types, the general one for any other.
func JobMachineForType(t lifecycle.JobType) string {
	switch t {
	case lifecycle.JobResearch, lifecycle.JobBrief, lifecycle.JobProposalPreprocess:
		return JobMachineSpecName
	}
	return lifecycle.JobMachineGeneral
}

// AnyJobState tells whether s is a state of either job machine: what a
// job record's status may hold.
func AnyJobState(s lifecycle.JobState) bool {
	return JobMachine().IsState(s) || GeneralJobMachine().IsState(s)
}
