package page_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// A graph agent's run page draws its steps and lights the path taken:
// "route" chooses "cheap", so "costly" is skipped and its edges are not
// taken; the step running is shown running, then completed.
func TestRunPageDrawsTheStepGraph(t *testing.T) {
	bin := chromium(t)
	const slug = "graph-demo"
	store := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	release := make(chan struct{})
	step := func(name string, next []string, after ...string) run.Step {
		return run.Step{Name: name, After: after, Idempotent: true, Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Summary: name, Data: json.RawMessage(`"` + name + `"`), Next: next}, nil
		}}
	}
	// Not idempotent: its start marker says it runs while it waits.
	cheap := run.Step{Name: "cheap", After: []string{"route"}, Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
		select {
		case <-release:
			return run.StepOutput{Summary: "cheap"}, nil
		case <-ctx.Done():
			return run.StepOutput{}, ctx.Err()
		}
	}}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet, StepRetries: -1, ShutdownGrace: time.Second},
		run.Agent{Slug: slug, Steps: []run.Step{step("route", []string{"cheap"}), cheap, step("costly", nil, "route"), step("report", nil, "cheap", "costly")}})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: runner, Store: store, Events: true, EventPollInterval: 50 * time.Millisecond, Page: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx0, stop := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- runner.Run(ctx0) }()
	go func() { done <- api.Run(ctx0) }()
	srv := httptest.NewServer(api)
	released := false
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
		if !released {
			close(release)
		}
		stop()
		for range 2 {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("worker: %v", err)
			}
		}
	}()
	res, err := runner.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: slug})
	if err != nil {
		t.Fatal(err)
	}

	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	overall := time.AfterFunc(2*time.Minute, closeBrowser)
	defer overall.Stop()
	node := func(name, status string) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(css(`[data-testid="graph-step-` + name + `"][data-status="` + status + `"]`))
	}
	do(t, ctx, "see cheap running and costly skipped", 20*time.Second,
		chromedp.Navigate(srv.URL+"/ui/#/runs/"+res.RunID),
		chromedp.WaitVisible(css(`#step-graph svg`)),
		node("route", "completed"), node("cheap", "running"), node("costly", "skipped"), node("report", "pending"),
	)
	close(release)
	released = true
	do(t, ctx, "see the run end with the path lit", 20*time.Second,
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
		node("cheap", "completed"), node("report", "completed"), node("costly", "skipped"),
	)
	taken := get(t, ctx, "read the edges", chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll('#step-graph .transition')].map((e) => [e.dataset.from + '>' + e.dataset.to, e.dataset.taken]))`))
	want := map[string]string{"route>cheap": "true", "route>costly": "false", "cheap>report": "true", "costly>report": "false"}
	for k, v := range want {
		if taken[k] != v {
			t.Errorf("edge %s taken=%q, want %s (all %v)", k, taken[k], v, taken)
		}
	}
	if len(taken) != len(want) {
		t.Errorf("edges %v, want %v", taken, want)
	}
	// The section is shown for a graph agent (a linear one keeps it hidden).
	if hidden := get(t, ctx, "graph section shown", chromedp.Evaluate[bool](`document.getElementById('graph-section').hidden`)); hidden {
		t.Error("the graph section is hidden for a graph agent")
	}
	// The agents page says what each step waits for.
	do(t, ctx, "open the agents page", 20*time.Second,
		chromedp.Navigate(srv.URL+"/ui/#/"),
		chromedp.WaitVisible(css(`[data-run="`+res.RunID+`"]`)),
	)
	if text := get(t, ctx, "read the page", chromedp.Evaluate[string](`document.body.innerText`)); !strings.Contains(text, "route; cheap (after route); costly (after route); report (after cheap, costly)") {
		t.Errorf("agents page does not list the graph's steps:\n%s", text)
	}
}
