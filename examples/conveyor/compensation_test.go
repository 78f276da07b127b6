package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// A run parked after two steps that can be undone, canceled with the CLI:
// watch prints the compensations in the order they ran, status the
// compensation_log of the run document.
func TestCompensationCLI(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	step := func(name string, await *run.Await) run.Step {
		return run.Step{Name: name,
			Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Summary: name, Await: await}, nil
			},
			CompensateAction: "release-" + name,
			Compensate:       func(context.Context, run.CompensateInput) error { return nil }}
	}
	r, err := run.NewRunner(run.Config{Store: store, Logger: quiet, PollInterval: 20 * time.Millisecond},
		run.Agent{Slug: "order", Machine: lifecycle.MachineApproval, Steps: []run.Step{
			step("reserve", nil), step("charge", &run.Await{Approval: "ship"}), step("ship", nil)}})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, r, store, httpapi.Config{})

	code, out, errs := conveyor(t, url, "submit", "order")
	if code != 0 {
		t.Fatalf("submit: %d %s", code, errs)
	}
	id := strings.TrimSpace(out)
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if st, err := r.Wait(wctx, id); err != nil || st.Status != "awaiting_approval" {
		t.Fatalf("at the gate: %s %v", st.Status, err)
	}
	if code, out, errs := conveyor(t, url, "cancel", id, "-reason", "out of stock"); code != 0 || !strings.Contains(out, `"compensating"`) {
		t.Fatalf("cancel: %d %s %s", code, out, errs)
	}
	code, out, errs = conveyor(t, url, "watch", id)
	if code != 0 {
		t.Fatalf("watch: %d %s %s", code, out, errs)
	}
	squash := strings.Join(strings.Fields(out), " ")
	charge, reserve := strings.Index(squash, "2-charge release-charge compensated 1"), strings.Index(squash, "1-reserve release-reserve compensated 1")
	if charge < 0 || reserve < charge || !strings.Contains(squash, "run "+id+" cancelled") {
		t.Errorf("watch prints:\n%s", out)
	}
	code, out, errs = conveyor(t, url, "status", id)
	var st lifecycle.RunStatus
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.CompensationLog) != 2 || st.CompensationLog[0].Step != "charge" {
		t.Errorf("status: %d %s %s", code, out, errs)
	}
}
