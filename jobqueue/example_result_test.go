package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Invoice is what a RENDER_INVOICE job's handler returns.
type Invoice struct {
	Number string `json:"number"`
	Cents  int    `json:"cents"`
}

// A Typed handler returns a Go value; ResultAs reads it back as that type
// once the job is COMPLETE.
func ExampleResultAs() {
	ctx := context.Background()
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New(), Types: map[lifecycle.JobType]jobqueue.TypeConfig{
		"RENDER_INVOICE": {Handler: jobqueue.Typed(func(ctx context.Context, order string) (Invoice, error) {
			return Invoice{Number: "INV-" + order, Cents: 4200}, nil
		})},
	}})
	job, _ := q.InsertJob(ctx, jobqueue.NewJob{JobID: "inv-1007", JobType: "RENDER_INVOICE", Payload: json.RawMessage(`"1007"`)})
	if _, err := jobqueue.ResultAs[Invoice](ctx, q, job.JobID); errors.Is(err, storage.ErrNotFound) {
		fmt.Println("before it runs: no result")
	}
	c, _ := q.Claim(ctx, "worker-1")
	c.Run(ctx, nil)
	inv, _ := jobqueue.ResultAs[Invoice](ctx, q, job.JobID)
	fmt.Printf("%s: %d cents\n", inv.Number, inv.Cents)
	if _, err := jobqueue.ResultAs[int](ctx, q, job.JobID); err != nil {
		fmt.Println(err)
	}
	// Output:
	// before it runs: no result
	// INV-1007: 4200 cents
	// jobqueue: result of job inv-1007 does not decode into int: json: cannot unmarshal object into Go value of type int
}
