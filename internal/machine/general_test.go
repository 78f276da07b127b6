package machine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestGeneralJobMachine: the general machine's moves, by event, actor and
// guard, from each state; and which machine a type and a record's name get.
func TestGeneralJobMachine(t *testing.T) {
	t.Parallel()
	m := machine.GeneralJobMachine()
	orch, admin := lifecycle.ActorOrchestration, lifecycle.ActorAdmin
	tests := []struct {
		from    lifecycle.JobState
		event   lifecycle.Event
		actor   lifecycle.Actor
		job     lifecycle.Job // attempts and error code, for the guards
		want    lifecycle.JobState
		wantErr error
	}{
		{lifecycle.JobPending, machine.EventValidate, orch, lifecycle.Job{}, lifecycle.JobQueued, nil},
		{lifecycle.JobQueued, machine.EventPickup, orch, lifecycle.Job{}, lifecycle.JobRunning, nil},
		{lifecycle.JobRunning, machine.EventCommit, orch, lifecycle.Job{}, lifecycle.JobComplete, nil},
		{lifecycle.JobRunning, machine.EventRetryableError, orch, lifecycle.Job{}, lifecycle.JobRetryBackoff, nil},
		{lifecycle.JobRetryBackoff, machine.EventBackoffElapsed, orch, lifecycle.Job{Attempt: 1, MaxAttempts: 3}, lifecycle.JobQueued, nil},
		{lifecycle.JobRetryBackoff, machine.EventBackoffElapsed, orch, lifecycle.Job{Attempt: 3, MaxAttempts: 3}, lifecycle.JobFailed, nil},
		{lifecycle.JobRetryBackoff, machine.EventBackoffElapsed, orch, lifecycle.Job{Attempt: 1, MaxAttempts: 3, ErrorCode: codes.JobPermanent}, lifecycle.JobFailed, nil},
		{lifecycle.JobFailed, machine.EventBury, orch, lifecycle.Job{}, lifecycle.JobDead, nil},
		{lifecycle.JobDead, machine.EventRequeue, admin, lifecycle.Job{}, lifecycle.JobQueued, nil},
		{lifecycle.JobDead, machine.EventRequeue, orch, lifecycle.Job{}, "", lifecycle.ErrForbiddenActor},
		{lifecycle.JobQueued, machine.EventCancel, admin, lifecycle.Job{}, lifecycle.JobCancelled, nil},
		{lifecycle.JobRetryBackoff, machine.EventCancel, admin, lifecycle.Job{}, lifecycle.JobCancelled, nil},
		{lifecycle.JobRunning, machine.EventCancel, orch, lifecycle.Job{}, lifecycle.JobCancelled, nil},
		{lifecycle.JobRunning, machine.EventCancel, admin, lifecycle.Job{}, "", lifecycle.ErrForbiddenActor},
		{lifecycle.JobComplete, machine.EventCancel, admin, lifecycle.Job{}, "", lifecycle.ErrTerminalState},
		{lifecycle.JobCancelled, machine.EventRequeue, admin, lifecycle.Job{}, "", lifecycle.ErrTerminalState},
		{lifecycle.JobQueued, machine.EventSnapshotReady, orch, lifecycle.Job{}, "", lifecycle.ErrInvalidTransition},
		{lifecycle.JobRunning, machine.EventSnooze, orch, lifecycle.Job{}, lifecycle.JobQueued, nil},
		{lifecycle.JobRunning, machine.EventSnooze, admin, lifecycle.Job{}, "", lifecycle.ErrForbiddenActor},
		{lifecycle.JobQueued, machine.EventSnooze, orch, lifecycle.Job{}, "", lifecycle.ErrInvalidTransition},
	}
	for _, tt := range tests {
		j := tt.job
		j.Status = tt.from
		_, err := m.Fire(context.Background(), &j, tt.event, tt.actor)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) || j.Status != tt.from {
				t.Errorf("%s on %s by %s: %v, now %s; want %v and no move", tt.event, tt.from, tt.actor, err, j.Status, tt.wantErr)
			}
			continue
		}
		if err != nil || j.Status != tt.want {
			t.Errorf("%s on %s by %s: %s, %v; want %s", tt.event, tt.from, tt.actor, j.Status, err, tt.want)
		}
	}
	if machine.JobMachine().IsState(lifecycle.JobRunning) || machine.JobMachine().IsState(lifecycle.JobCancelled) {
		t.Error("the spec's job machine gained a general state")
	}
	for typ, want := range map[lifecycle.JobType]string{lifecycle.JobBrief: machine.JobMachineSpecName, lifecycle.JobResearch: machine.JobMachineSpecName,
		lifecycle.JobProposalPreprocess: machine.JobMachineSpecName, "SEND_EMAIL": lifecycle.JobMachineGeneral} {
		if got := machine.JobMachineForType(typ); got != want {
			t.Errorf("%s runs on %q, want %q", typ, got, want)
		}
	}
	if machine.JobMachineNamed("") != machine.JobMachine() || machine.JobMachineNamed("general-job") != m || machine.JobMachineNamed("other") != nil {
		t.Error("JobMachineNamed: a record without a machine is the spec's, an unknown name none")
	}
}
