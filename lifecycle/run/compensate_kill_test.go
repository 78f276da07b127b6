package run_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// compKillEnv makes the test binary a runner process killed inside a
// compensation (see compKillMain); its value is the shared directory.
const compKillEnv = "CONVEYOR_LIFECYCLE_COMP_HELPER"

// compKillAgent's steps and compensations append their name to
// dir/executions.log each time they run. In the victim process the
// compensation of "reserve" announces itself and hangs until killed.
func compKillAgent(dir string, victim bool) run.Agent {
	record := func(name string) error { return logExecution(dir, name) }
	step := func(name string) run.Step {
		return run.Step{Name: name, Resumable: true,
			Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Summary: name}, record(name)
			},
			Compensate: func(ctx context.Context, in run.CompensateInput) error {
				if err := record("undo-" + name); err != nil {
					return err
				}
				if victim && name == "reserve" {
					if err := os.WriteFile(filepath.Join(dir, "in-undo"), nil, 0o644); err != nil {
						return err
					}
					<-ctx.Done() // until SIGKILL
					return ctx.Err()
				}
				return nil
			}}
	}
	hold := run.Step{Name: "hold", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		if err := os.WriteFile(filepath.Join(dir, "in-hold"), nil, 0o644); err != nil {
			return run.StepOutput{}, err
		}
		<-ctx.Done() // until the cancel
		return run.StepOutput{}, ctx.Err()
	}}
	return run.Agent{Slug: "undoable", Machine: lifecycle.MachineCancelable, Steps: []run.Step{step("reserve"), step("charge"), hold}}
}

// compKillMain is the victim: one run of compKillAgent.
func compKillMain() int {
	return victimMain(compKillEnv, 200*time.Millisecond, func(dir string, _ **run.Runner, _ *string) run.Agent { return compKillAgent(dir, true) })
}

// A runner killed with SIGKILL inside a compensation: another runner takes
// the compensating run over, runs the compensation in flight again (at
// least once), never the one already recorded, and ends the run canceled
// with the whole log.
func TestSIGKILLedCompensationResumes(t *testing.T) {
	t.Parallel()
	onKillStores(t, false, testCompKill)
}

func testCompKill(t *testing.T, dir string, env []string, open func() *storage.Store) {
	v, runID := startVictim(t, compKillEnv, dir, env)
	exists := func(name string) func() bool {
		return func() bool { _, err := os.Stat(filepath.Join(dir, name)); return err == nil }
	}
	until(t, "the victim to enter hold", exists("in-hold"))
	store := open()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The cancel comes from another process's runner (the gateway's); the
	// victim learns it at its next heartbeat and starts compensating.
	gw, err := run.NewRunner(run.Config{Store: store, Owner: "gateway", Logger: quiet}, compKillAgent(dir, false))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := gw.Cancel(context.Background(), runID, lifecycle.ActorGateway, run.CancelRequest{Reason: "customer left"}); err != nil || st.Status != "cancel_requested" {
		t.Fatalf("cancel: %+v %v", st, err)
	}
	until(t, "the victim to enter the compensation of reserve", exists("in-undo"))
	v.kill(t)
	mid, err := gw.Status(context.Background(), runID)
	if err != nil || mid.Status != "compensating" || len(mid.CompensationLog) != 1 || mid.CompensationLog[0].Step != "charge" {
		t.Fatalf("at the kill: %+v %v", mid, err)
	}

	// A second runner, whose clock reads past the victim's lease.
	st, _ := rescue(t, v, store, compKillAgent(dir, false), runID)
	if st.Status != "canceled" || st.ResumeCount != 1 || st.Error != nil || st.CancelReason != "customer left" {
		t.Fatalf("after takeover: %+v", st)
	}
	if got, want := logSteps(st), []string{"charge:compensated", "reserve:compensated"}; !slices.Equal(got, want) {
		t.Errorf("compensation_log %v, want %v", got, want)
	}
	if st.CompensationLog[0] != mid.CompensationLog[0] {
		t.Errorf("the recorded compensation changed: %+v, was %+v", st.CompensationLog[0], mid.CompensationLog[0])
	}
	got := executions(t, dir)
	want := []string{"reserve", "charge", "undo-charge", "undo-reserve", "undo-reserve"}
	if !slices.Equal(got, want) {
		t.Errorf("executions %v, want %v: undo-charge once (recorded), undo-reserve again (in flight at the kill)", got, want)
	}
}
