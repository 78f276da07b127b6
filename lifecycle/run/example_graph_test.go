package run_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// An agent whose steps form a graph: "triage" chooses one of two
// branches, the other is skipped, and "reply" joins them with the
// outputs of the steps before it by name.
func ExampleStep_After() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	step := func(name string, after ...string) run.Step {
		return run.Step{Name: name, After: after, Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Data: json.RawMessage(`"` + name + ` done"`)}, nil
		}}
	}
	triage := run.Step{Name: "triage", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Data: json.RawMessage(`"easy"`), Next: []string{"answer"}}, nil
	}}
	reply := run.Step{Name: "reply", After: []string{"answer", "escalate"}, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		fmt.Printf("reply sees triage=%s answer=%s escalate=%s\n", in.Outputs["triage"], in.Outputs["answer"], in.Outputs["escalate"])
		return run.StepOutput{}, nil
	}}
	r, err := run.NewRunner(run.Config{Store: memstore.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		run.Agent{Slug: "support", Steps: []run.Step{triage, step("answer", "triage"), step("escalate", "triage"), reply}})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "support"})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, _ := r.Wait(ctx, res.RunID)
	steps, _ := r.Steps(ctx, res.RunID)
	fmt.Println(st.Status, st.StepsCompleted)
	for _, s := range steps {
		fmt.Println(s.StepName, s.Status)
	}
	stop()
	<-done
	// Output:
	// reply sees triage="easy" answer="answer done" escalate=
	// completed 4
	// triage completed
	// answer completed
	// escalate skipped
	// reply completed
}
