package jobqueue_test

import (
	"context"
	"fmt"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Greet is the payload of a GREET job: any type encoding/json handles.
type Greet struct {
	Name string `json:"name"`
}

// A job that stands alone: a type of your own with a typed handler, a
// payload, no run and no agent. A Worker runs it; Wait returns it once it
// is COMPLETE or DEAD, and Result reads what the handler returned.
func Example_job() {
	ctx, stop := context.WithCancel(context.Background())
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New(), Types: map[lifecycle.JobType]jobqueue.TypeConfig{
		"GREET": {Handler: jobqueue.Typed(func(ctx context.Context, g Greet) (string, error) {
			return "hello, " + g.Name, nil
		})},
	}})
	w := &jobqueue.Worker{Queue: q, ID: "worker-1"}
	stopped := make(chan error)
	go func() { stopped <- w.Run(ctx) }()

	job, _ := q.Insert(ctx, "GREET", Greet{Name: "Ada"})
	done, _ := q.Wait(ctx, job.JobID)
	res, _ := q.Result(ctx, job.JobID)
	fmt.Println(done.Status, done.AgentSlug, string(res.Content))
	stop()
	<-stopped
	// Output:
	// COMPLETE _type.GREET "hello, Ada"
}
