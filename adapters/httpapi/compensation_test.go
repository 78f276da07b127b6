package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// A run parked after two completed steps that declare compensations,
// canceled over HTTP: the cancel answers compensating, both compensations
// run in reverse order, and the run document (Go client and raw JSON)
// carries the compensation_log.
func TestCompensationOverHTTP(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var mu sync.Mutex
	var undone []string
	step := func(name string, await bool) run.Step {
		return run.Step{Name: name,
			Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
				out := run.StepOutput{Summary: name}
				if await {
					out.Await = &run.Await{Approval: "ship"}
				}
				return out, nil
			},
			CompensateAction: "release-" + name,
			Compensate: func(context.Context, run.CompensateInput) error {
				mu.Lock()
				defer mu.Unlock()
				undone = append(undone, name)
				return nil
			}}
	}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet, PollInterval: 50 * time.Millisecond, ShutdownGrace: time.Second},
		run.Agent{Slug: "order", Machine: lifecycle.MachineApproval, Steps: []run.Step{step("reserve", false), step("charge", true), quickStep("ship")}})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Runner: runner, Store: store, Tokens: tokens, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- runner.Run(ctx) }()
	defer func() { stop(); <-ran }()

	c := &client.Client{BaseURL: srv.URL, HTTP: srv.Client(), Token: "tok-gateway"}
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Submit(wctx, lifecycle.SubmitRequest{AgentSlug: "order"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := c.Status(wctx, res.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status == "awaiting_approval" && st.Lease == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, err := c.Cancel(wctx, res.RunID, "out of stock")
	if err != nil || st.Status != "compensating" {
		t.Fatalf("cancel: %+v %v", st, err)
	}
	st, err = c.Wait(wctx, res.RunID)
	if err != nil || st.Status != "cancelled" {
		t.Fatalf("wait: %+v %v", st, err)
	}
	if got := []string{st.CompensationLog[0].Step, st.CompensationLog[1].Step}; len(st.CompensationLog) != 2 || !slices.Equal(got, []string{"charge", "reserve"}) {
		t.Fatalf("compensation_log %+v", st.CompensationLog)
	}
	mu.Lock()
	if !slices.Equal(undone, []string{"charge", "reserve"}) {
		t.Errorf("compensations ran %v", undone)
	}
	mu.Unlock()

	req, _ := http.NewRequestWithContext(wctx, http.MethodGet, srv.URL+"/runs/"+res.RunID+"/status", nil)
	req.Header.Set("Authorization", "Bearer tok-frontend")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Status string           `json:"status"`
		Log    []map[string]any `json:"compensation_log"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET status: %d %v", resp.StatusCode, err)
	}
	if len(doc.Log) != 2 {
		t.Fatalf("raw compensation_log %+v", doc.Log)
	}
	for _, k := range []string{"step", "step_number", "action", "started_at", "ended_at", "outcome"} {
		if _, ok := doc.Log[0][k]; !ok {
			t.Errorf("entry %v has no %s", doc.Log[0], k)
		}
	}
	if doc.Log[0]["action"] != "release-charge" || doc.Log[0]["outcome"] != "compensated" {
		t.Errorf("first entry %v", doc.Log[0])
	}
}
