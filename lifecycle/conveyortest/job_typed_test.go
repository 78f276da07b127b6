package conveyortest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/conveyortest"
)

type greet struct {
	Name string `json:"name"`
}

// TestRunJobTypedHandler: RunJob drives a Handler that is not the NLM pipeline's
// (a Typed one, of a stand-alone job) as it drives Handlers: a first
// attempt that hangs is timed out at 120 s and retried after 15 s, in no
// real time, whether the handler is the type's own or given to RunJob.
func TestRunJobTypedHandler(t *testing.T) {
	t.Parallel()
	for _, own := range []bool{true, false} {
		var calls atomic.Int32
		h := jobqueue.Typed(func(ctx context.Context, g greet) (string, error) {
			if calls.Add(1) == 1 {
				return "", conveyortest.Hang(ctx)
			}
			return "hello, " + g.Name, nil
		})
		tc, given := jobqueue.TypeConfig{}, h
		if own {
			tc, given = jobqueue.TypeConfig{Handler: h}, nil
		}
		job, art := conveyortest.RunJob(t, given, jobqueue.NewJob{JobType: "GREET", Payload: []byte(`{"name":"Ada"}`)},
			func(c *jobqueue.Config) { c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{"GREET": tc} })
		if job.Status != lifecycle.JobComplete || job.Attempt != 2 || job.AgentSlug != "_type.GREET" || art == nil || string(art.Content) != `"hello, Ada"` {
			t.Fatalf("own %v: job %+v, artifact %+v", own, job, art)
		}
		if d := job.UpdatedAt.Sub(job.CreatedAt); d < (120+15)*time.Second {
			t.Fatalf("own %v: done after %v, want the step timeout and the first backoff", own, d)
		}
	}
}
