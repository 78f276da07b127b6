package jobqueue_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/testkit/machinetest"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The job's transition table (docs/spec.md#job-lifecycle), transcribed by
// hand, with the extension DEAD → QUEUED (the operator's requeue, invariant F2).
var specJob = map[lifecycle.JobState][]lifecycle.JobState{
	"PENDING":          {"QUEUED"},
	"QUEUED":           {"CONTEXT_ASSEMBLY"},
	"CONTEXT_ASSEMBLY": {"NOTEBOOKLM_CALL", "RETRY_BACKOFF"},
	"NOTEBOOKLM_CALL":  {"ARTIFACT_WRITE", "RETRY_BACKOFF"},
	"ARTIFACT_WRITE":   {"COMPLETE", "RETRY_BACKOFF"},
	"RETRY_BACKOFF":    {"QUEUED", "FAILED"},
	"FAILED":           {"DEAD", "QUEUED"},
	"DEAD":             {"QUEUED"},
	"COMPLETE":         {},
}

func TestJobGrid(t *testing.T) {
	t.Parallel()
	machinetest.Grid(t, machine.JobMachine(), specJob)
}

func TestStructure(t *testing.T) {
	t.Parallel()
	machinetest.Structure(t, machine.JobMachine().Spec())
}

func TestJobTerminalsAndExtensions(t *testing.T) {
	t.Parallel()
	m := machine.JobMachine()
	for _, s := range machine.JobStates() {
		want := s == lifecycle.JobComplete || s == lifecycle.JobDead
		if m.IsTerminal(s) != want {
			t.Errorf("IsTerminal(%s) = %v", s, !want)
		}
	}
	for _, tr := range m.Transitions() {
		wantExt := tr.From == lifecycle.JobDead
		if tr.Extension != wantExt {
			t.Errorf("%s → %s: Extension = %v", tr.From, tr.To, tr.Extension)
		}
		wantRequeue := tr.Event == machine.EventRequeue
		if tr.Requeue != wantRequeue {
			t.Errorf("%s → %s: Requeue = %v", tr.From, tr.To, tr.Requeue)
		}
	}
	// F1: nothing leaves COMPLETE, not even for an admin.
	if next := m.Next(lifecycle.JobComplete); len(next) != 0 {
		t.Errorf("COMPLETE → %v", next)
	}
}

// TestBackoffElapsedRoutesByAttempt: one event leaves RETRY_BACKOFF, and the
// guards on attempt pick QUEUED or FAILED.
func TestBackoffElapsedRoutesByAttempt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attempt, max int
		want         lifecycle.JobState
	}{
		{1, 3, lifecycle.JobQueued},
		{2, 3, lifecycle.JobQueued},
		{3, 3, lifecycle.JobFailed},
		{4, 3, lifecycle.JobFailed},
		{0, 0, lifecycle.JobFailed},
		{1, 1, lifecycle.JobFailed},
		{1, 5, lifecycle.JobQueued},
	}
	for _, tt := range tests {
		job := &lifecycle.Job{JobID: "j", Status: lifecycle.JobRetryBackoff, Attempt: tt.attempt, MaxAttempts: tt.max}
		change, err := machine.JobMachine().Fire(context.Background(), job, machine.EventBackoffElapsed, lifecycle.ActorOrchestration)
		if err != nil {
			t.Fatalf("attempt %d/%d: %v", tt.attempt, tt.max, err)
		}
		if job.Status != tt.want || change.To != tt.want {
			t.Errorf("attempt %d/%d: went to %s, want %s", tt.attempt, tt.max, job.Status, tt.want)
		}
	}
}

// TestThreeAttemptsEndDead walks a job through three failed attempts with
// max_attempts 3, counting attempts at pickup as documented on Job.
func TestThreeAttemptsEndDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := machine.JobMachine()
	job := &lifecycle.Job{JobID: "j", Status: lifecycle.JobPending, MaxAttempts: 3}
	fire := func(e lifecycle.Event, actor lifecycle.Actor) {
		t.Helper()
		if _, err := m.Fire(ctx, job, e, actor); err != nil {
			t.Fatalf("%s from %s: %v", e, job.Status, err)
		}
	}
	orch := lifecycle.ActorOrchestration
	fire(machine.EventValidate, orch)
	for attempt := 1; attempt <= 3; attempt++ {
		fire(machine.EventPickup, orch)
		job.Attempt++
		fire(machine.EventRetryableError, orch)
		fire(machine.EventBackoffElapsed, orch)
		want := lifecycle.JobQueued
		if attempt == 3 {
			want = lifecycle.JobFailed
		}
		if job.Status != want {
			t.Fatalf("after attempt %d: %s, want %s", attempt, job.Status, want)
		}
	}
	fire(machine.EventBury, orch)
	if job.Status != lifecycle.JobDead {
		t.Fatalf("status %s, want DEAD", job.Status)
	}
	// F2: no automatic way out of DEAD; only the admin's requeue.
	_, err := m.Fire(ctx, job, machine.EventRequeue, orch)
	var fe *lifecycle.ForbiddenActorError
	if !errors.As(err, &fe) || fe.Allowed[0] != lifecycle.ActorAdmin {
		t.Fatalf("orchestration requeueing DEAD: %v", err)
	}
	fire(machine.EventRequeue, lifecycle.ActorAdmin)
	if job.Status != lifecycle.JobQueued {
		t.Fatalf("status %s after requeue", job.Status)
	}
}

func TestGuardRefusalIsTyped(t *testing.T) {
	t.Parallel()
	// A retryable error from QUEUED is no move of the table.
	job := &lifecycle.Job{Status: lifecycle.JobQueued}
	_, err := machine.JobMachine().Fire(context.Background(), job, machine.EventRetryableError, lifecycle.ActorOrchestration)
	var ite *lifecycle.InvalidTransitionError
	if !errors.As(err, &ite) || ite.Event != string(machine.EventRetryableError) || ite.ValidNext[0] != "CONTEXT_ASSEMBLY" {
		t.Fatalf("got %v", err)
	}
}

func newJob(s lifecycle.JobState) *lifecycle.Job   { return &lifecycle.Job{Status: s, MaxAttempts: 3} }
func jobState(j *lifecycle.Job) lifecycle.JobState { return j.Status }

// bumpAttempt lets the walks move the attempt count, so both guards fire.
func bumpAttempt(j *lifecycle.Job, b byte) {
	if b&1 == 1 {
		j.Attempt++
	}
}

func TestRandomWalks(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	reachedJob := map[lifecycle.JobState]bool{}
	for range 3000 {
		choices := make([]byte, 2*(1+rng.IntN(30)))
		for i := range choices {
			choices[i] = byte(rng.Uint32())
		}
		for _, s := range machinetest.Walk(t, machine.JobMachine(), newJob, jobState, bumpAttempt, choices) {
			reachedJob[s] = true
		}
	}
	for _, s := range machine.JobStates() {
		if !reachedJob[s] {
			t.Errorf("job walks never reached %s", s)
		}
	}
}

func FuzzJobWalk(f *testing.F) {
	f.Add([]byte{0, 1, 1, 1, 3, 1, 8, 1})
	f.Fuzz(func(t *testing.T, choices []byte) {
		machinetest.Walk(t, machine.JobMachine(), newJob, jobState, bumpAttempt, choices)
	})
}
