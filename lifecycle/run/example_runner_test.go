package run_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

func ExampleRunner() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	research := func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "brief written", Proposals: []string{"prop_2026-02-14_xyz789"}}, nil
	}
	r, err := run.NewRunner(run.Config{
		Store:  memstore.New(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, run.Agent{
		Slug:  "archivist-violin",
		Steps: []run.Step{{Name: "research", Run: research}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()

	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "archivist-violin"})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := r.Wait(ctx, res.RunID)
	fmt.Println(st.Status, st.StepsCompleted, st.ProposalsCreated, st.Error, err)
	steps, _ := r.Steps(ctx, res.RunID)
	fmt.Println(steps[0].StepName, steps[0].Status, steps[0].OutputSummary)
	stop()
	<-done
	// Output:
	// completed 1 [prop_2026-02-14_xyz789] <nil> <nil>
	// research completed brief written
}
