package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// graphAgent routes to "cheap" and skips "costly"; "report" joins them.
func graphAgent() run.Agent {
	step := func(name string, next []string, after ...string) run.Step {
		return run.Step{Name: name, After: after, Idempotent: true, Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Summary: name, Data: json.RawMessage(`"` + name + `"`), Next: next}, nil
		}}
	}
	return run.Agent{Slug: "router", Steps: []run.Step{
		step("route", []string{"cheap"}), step("cheap", nil, "route"), step("costly", nil, "route"),
		step("report", nil, "cheap", "costly"),
	}}
}

// Over HTTP a graph agent lists its dependencies, and its run's steps
// listing shows every step with its state: the branch not taken skipped.
func TestGraphRunOverHTTP(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	runner, err := run.NewRunner(run.Config{Store: store, Owner: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		graphAgent(), run.Agent{Slug: "line", Steps: []run.Step{quickStep("one")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx) }()
	defer func() { cancel(); <-done }()
	srv, err := httpapi.New(httpapi.Config{Runner: runner, Store: store, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c := &client.Client{BaseURL: ts.URL, Token: "tok-gateway", HTTP: ts.Client()}

	agents, err := c.Agents(ctx)
	if err != nil || len(agents) != 2 {
		t.Fatalf("Agents = %+v, %v", agents, err)
	}
	if a := agents[1]; a.Slug != "router" || !slices.Equal(a.After["report"], []string{"cheap", "costly"}) || a.After["route"] == nil {
		t.Errorf("graph agent %+v", a)
	}
	if a := agents[0]; a.After != nil {
		t.Errorf("linear agent %+v", a)
	}
	res, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "router"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if st, err := runner.Wait(wctx, res.RunID); err != nil || st.Status != "completed" || st.StepsCompleted != 4 {
		t.Fatalf("run %+v, %v", st, err)
	}
	steps, err := c.Steps(ctx, res.RunID)
	if err != nil || len(steps) != 4 {
		t.Fatalf("Steps = %+v, %v", steps, err)
	}
	want := []lifecycle.StepState{lifecycle.StepCompleted, lifecycle.StepCompleted, lifecycle.StepSkipped, lifecycle.StepCompleted}
	for i, s := range steps {
		if s.Status != want[i] {
			t.Errorf("step %s: %s, want %s", s.StepName, s.Status, want[i])
		}
	}
	if !slices.Equal(steps[0].Next, []string{"cheap"}) || !slices.Equal(steps[3].After, []string{"cheap", "costly"}) {
		t.Errorf("records %+v", steps)
	}
}
