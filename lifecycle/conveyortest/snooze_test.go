package conveyortest_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/conveyortest"
)

// TestRunJobSnoozeAndUnique: RunJob runs a job that snoozes an hour twice
// to its end on the fake clock, in no wall time, its attempt never used
// up; and a unique job as any other, at its derived id.
func TestRunJobSnoozeAndUnique(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	wait := jobqueue.TypeConfig{Handler: jobqueue.HandlerFunc(func(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error) {
		if calls.Add(1) <= 2 {
			return lifecycle.JobOutput{}, jobqueue.Snooze(time.Hour)
		}
		return lifecycle.JobOutput{Content: json.RawMessage(`{"done":true}`)}, nil
	})}
	types := func(c *jobqueue.Config) { c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{"POLL": wait} }
	start := time.Now()
	job, art := conveyortest.RunJob(t, nil, jobqueue.NewJob{JobType: "POLL", MaxAttempts: 1}, types)
	if job.Status != lifecycle.JobComplete || job.Attempt != 1 || calls.Load() != 3 || art == nil {
		t.Fatalf("job %s attempt %d after %d calls, artifact %v; want COMPLETE at attempt 1 after 3", job.Status, job.Attempt, calls.Load(), art)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("two snoozes of an hour took %s of wall time", el)
	}
	calls.Store(2) // no more snoozes
	job, _ = conveyortest.RunJob(t, nil, jobqueue.NewJob{JobType: "POLL", Unique: &lifecycle.Unique{Key: "k", Period: time.Hour}}, types)
	if job.Status != lifecycle.JobComplete || !strings.HasPrefix(job.JobID, "u-") {
		t.Fatalf("unique job %s %s", job.JobID, job.Status)
	}
}
