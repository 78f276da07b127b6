package conveyor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/runconveyor/conveyor"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// A Client of one agent and one job type over a memory store: New builds
// every engine from the one Config, Start runs them, and Stop stops them.
func Example() {
	ctx := context.Background()
	c, err := conveyor.New(conveyor.Config{
		Store:  memstore.New(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Agents: []run.Agent{{Slug: "greeter", Steps: []run.Step{{Name: "greet", Idempotent: true,
			Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Summary: "hello, " + string(in.Input)}, nil
			}}}}},
		JobTypes: map[lifecycle.JobType]jobqueue.TypeConfig{"SHOUT": {Handler: jobqueue.Typed(
			func(ctx context.Context, s string) (string, error) { return s + "!", nil })}},
	})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Stop(ctx)

	res, _ := c.Runs().Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "greeter", Input: []byte(`"Ada"`)})
	st, _ := c.Runs().Wait(ctx, res.RunID)
	job, _ := c.Jobs().Insert(ctx, "SHOUT", "hey")
	done, _ := c.Jobs().Wait(ctx, job.JobID)
	out, _ := c.Jobs().Result(ctx, job.JobID)
	fmt.Println(st.Status, done.Status, string(out.Content))
	// Output:
	// completed COMPLETE "hey!"
}
