package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// Example serves a Runner over HTTP and drives it with the Client: submit a
// run, read its status and steps, and see a refusal as the SDK's sentinel.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	store := memstore.New()
	runner, _ := run.NewRunner(run.Config{Store: store}, run.Agent{
		Slug: "archivist-violin",
		Steps: []run.Step{{Name: "research", Idempotent: true, Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Summary: "3 sources"}, nil
		}}},
	})
	done := make(chan error)
	go func() { done <- runner.Run(ctx) }()
	defer func() { cancel(); <-done }()

	srv, _ := httpapi.New(httpapi.Config{Runner: runner, Store: store,
		Tokens: map[string]lifecycle.Actor{"s3cret": lifecycle.ActorGateway}})
	ts := httptest.NewServer(srv) // 127.0.0.1
	defer ts.Close()

	c := &client.Client{BaseURL: ts.URL, Token: "s3cret", HTTP: ts.Client()}
	res, _ := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "archivist-violin", IdempotencyKey: "req-1"})
	_, _ = runner.Wait(ctx, res.RunID) // or c.Wait, which follows /events/stream or polls every 5 s
	st, _ := c.Status(ctx, res.RunID)
	steps, _ := c.Steps(ctx, res.RunID)
	fmt.Println(st.Status, st.StepsCompleted, steps[0].StepName, steps[0].OutputSummary)

	again, _ := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "archivist-violin", IdempotencyKey: "req-1"})
	fmt.Println("duplicate:", again.Duplicate, again.RunID == res.RunID)

	_, err := c.Status(ctx, "run-unknown")
	var apiErr *client.Error
	fmt.Println(errors.Is(err, lifecycle.ErrRunNotFound), errors.As(err, &apiErr) && apiErr.Status == 404, apiErr.Code)
	// Output:
	// completed 1 research 3 sources
	// duplicate: true true
	// true true RUN_NOT_FOUND
}

// ExampleLimits serves a Server as the Worker does: the Server applies the
// body's deadline, the http.Server and the listener the other limits.
func ExampleLimits() {
	runner, _ := run.NewRunner(run.Config{Store: memstore.New()}, run.Agent{Slug: "echo", Steps: []run.Step{{Name: "say",
		Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}})
	lim := httpapi.Limits{MaxConnsPerAddr: 16}
	s, _ := httpapi.New(httpapi.Config{Runner: runner, Limits: lim})
	srv := lim.HTTPServer(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = srv.Serve(lim.Listener(ln)) }()
	defer srv.Close()
	fmt.Println(srv.ReadHeaderTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	c := &client.Client{BaseURL: "http://" + ln.Addr().String()}
	fmt.Println(c.Health(context.Background()))
	// Output:
	// 10s 2m0s 65536
	// <nil>
}
