package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// Example starts a Worker in the process (a Runner on memstore, its event
// feed and the HTTP API on 127.0.0.1), then uses only the client: submit a
// run, wait for it over the event stream, print its status, and see a
// refusal as the SDK's sentinel. A program that only calls a Worker imports
// client and lifecycle, nothing of the engine.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	store := memstore.New()
	runner, _ := run.NewRunner(run.Config{Store: store}, run.Agent{
		Slug: "archivist-violin",
		Steps: []run.Step{{Name: "research", Idempotent: true, Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Summary: "3 sources"}, nil
		}}},
	})
	srv, _ := httpapi.New(httpapi.Config{Runner: runner, Store: store, Events: true, EventPollInterval: 10 * time.Millisecond,
		Tokens: map[string]lifecycle.Actor{"s3cret": lifecycle.ActorGateway}})
	done := make(chan struct{}, 2)
	go func() { _ = runner.Run(ctx); done <- struct{}{} }()
	go func() { _ = srv.Run(ctx); done <- struct{}{} }()
	ts := httptest.NewServer(srv) // 127.0.0.1
	defer func() { ts.Close(); cancel(); <-done; <-done }()

	c := &client.Client{BaseURL: ts.URL, Token: "s3cret", HTTP: ts.Client()}
	res, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "archivist-violin", IdempotencyKey: "req-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := c.Wait(ctx, res.RunID) // follows /events/stream; polls every 5 s without it
	fmt.Println(st.Status, st.StepsCompleted, lifecycle.RunFinished(st.Machine, st.Status), err)

	_, err = c.Status(ctx, "run-unknown")
	var apiErr *client.Error
	fmt.Println(errors.Is(err, lifecycle.ErrRunNotFound), errors.As(err, &apiErr) && apiErr.Status == 404, apiErr.Code)
	// Output:
	// completed 1 true <nil>
	// true true RUN_NOT_FOUND
}
