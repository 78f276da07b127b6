package machine_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

func ExampleMachine_Check() {
	m := machine.CancelableRun()
	fmt.Println(m.Check(machine.CancelableRunning, machine.CancelableCancelRequested))

	err := m.Check(machine.CancelableSucceeded, machine.CancelableRunning)
	fmt.Println(errors.Is(err, lifecycle.ErrInvalidTransition), errors.Is(err, lifecycle.ErrTerminalState))
	fmt.Println(err)
	// Output:
	// <nil>
	// true true
	// cancelable-run: invalid transition from "succeeded" to "running": "succeeded" is a terminal state (no valid next states)
}

func ExampleMachine_Fire() {
	ctx := context.Background()
	m := machine.CanonicalRun()
	run := &record{RunID: "run_2026-02-14_080000_abc123", Status: string(m.Initial())}

	for _, event := range []lifecycle.Event{machine.EventAdmit, machine.EventStart, machine.EventComplete} {
		change, err := m.Fire(ctx, run, event, lifecycle.ActorOrchestration)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %s → %s\n", change.Event, change.From, change.To)
	}

	// Mastra executes steps but never writes status.
	_, err := m.Fire(ctx, run, machine.EventFail, lifecycle.ActorMastra)
	var ite *lifecycle.InvalidTransitionError
	if errors.As(err, &ite) {
		fmt.Println(ite.Code(), run.Status)
	}
	// Output:
	// admit: requested → queued
	// start: queued → running
	// complete: running → completed
	// RUN_TERMINAL_STATE completed
}

func ExampleMachine_Next() {
	m := machine.ApprovalRun()
	fmt.Println(m.Next(machine.ApprovalAwaitingApproval))
	fmt.Println(m.IsTerminal(machine.ApprovalCancelled))
	// Output:
	// [running completed failed cancelled compensating]
	// true
}

func ExampleMermaid() {
	fmt.Print(machine.Mermaid(machine.RunStep().Spec()))
	// Output:
	// stateDiagram-v2
	//     %% run-step
	//     [*] --> pending
	//     pending --> running : start
	//     pending --> skipped : skip
	//     running --> completed : complete
	//     running --> failed : fail
	//     completed --> [*]
	//     failed --> [*]
	//     skipped --> [*]
}
