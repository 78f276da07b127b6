package jobqueue_test

import (
	"context"
	"fmt"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

func ExampleJobMachine() {
	ctx := context.Background()
	m := machine.JobMachine()
	job := &lifecycle.Job{JobID: "job-1", Status: lifecycle.JobRetryBackoff, Attempt: 3, MaxAttempts: 3}

	// backoff_elapsed goes back to QUEUED while attempts are left; this job
	// has none, so its guard sends it to FAILED.
	change, err := m.Fire(ctx, job, machine.EventBackoffElapsed, lifecycle.ActorOrchestration)
	fmt.Println(change.From, "→", change.To, err)
	fmt.Println(m.Next(lifecycle.JobFailed))
	// Output:
	// RETRY_BACKOFF → FAILED <nil>
	// [QUEUED DEAD]
}
