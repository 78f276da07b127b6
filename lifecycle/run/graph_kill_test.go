package run_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// graphKillEnv makes the test binary the victim of the graph kill test
// (see graphKillMain): its value is the directory the processes share.
const graphKillEnv = "CONVEYOR_GRAPH_KILL_HELPER"

// graphKillAgent forks after "fetch" into "charge" (a side effect that
// must never repeat) and "render" (idempotent, replayed), joined by
// "publish". Every step appends its name to dir/executions.log. In the
// victim, render announces itself once charge's step file is written and
// hangs until killed.
func graphKillAgent(dir string, victim bool, chargeDone func() bool) run.Agent {
	step := func(name string, resumable, idempotent bool, after []string, body func(ctx context.Context) error) run.Step {
		return run.Step{Name: name, Resumable: resumable, Idempotent: idempotent, After: after,
			Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				if err := logExecution(dir, name); err != nil {
					return run.StepOutput{}, err
				}
				if body != nil {
					if err := body(ctx); err != nil {
						return run.StepOutput{}, err
					}
				}
				data, _ := json.Marshal(outputsOf(in))
				return run.StepOutput{Summary: name, Data: data}, nil
			}}
	}
	hang := func(ctx context.Context) error {
		if !victim {
			return nil
		}
		for !chargeDone() {
			time.Sleep(10 * time.Millisecond)
		}
		if err := os.WriteFile(filepath.Join(dir, "in-render"), nil, 0o644); err != nil {
			return err
		}
		<-ctx.Done() // until SIGKILL
		return ctx.Err()
	}
	return run.Agent{Slug: "forked", Steps: []run.Step{
		step("fetch", true, true, nil, nil),
		step("charge", true, false, []string{"fetch"}, nil),
		step("render", false, true, []string{"fetch"}, hang),
		step("publish", true, false, []string{"charge", "render"}, nil),
	}}
}

// graphKillMain is the victim process: one run of graphKillAgent, whose
// render step waits until charge is recorded completed.
func graphKillMain() int {
	return victimMain(graphKillEnv, 500*time.Millisecond, func(dir string, r **run.Runner, runID *string) run.Agent {
		chargeDone := func() bool {
			steps, err := (*r).Steps(context.Background(), *runID)
			return err == nil && slices.ContainsFunc(steps, func(s lifecycle.StepRecord) bool {
				return s.StepName == "charge" && s.Status == lifecycle.StepCompleted
			})
		}
		return graphKillAgent(dir, true, chargeDone)
	})
}

// A runner killed (SIGKILL) in one branch of a graph, after the other
// branch completed: a second runner takes the run over, runs the branch
// not done (render, idempotent, again), never the done one (charge), and
// the join gets both outputs.
func TestSIGKILLedGraphRunnerIsTakenOver(t *testing.T) {
	t.Parallel()
	onKillStores(t, false, testGraphSIGKILL)
}

func testGraphSIGKILL(t *testing.T, dir string, env []string, open func() *storage.Store) {
	v, runID := startVictim(t, graphKillEnv, dir, env)
	until(t, "the victim to enter render after charge", func() bool {
		_, err := os.Stat(filepath.Join(dir, "in-render"))
		return err == nil
	})
	v.kill(t)

	// A second runner, whose clock reads past the victim's lease.
	st, r := rescue(t, v, open(), graphKillAgent(dir, false, nil), runID)
	if st.Status != "completed" || st.ResumeCount != 1 || st.StepsCompleted != 4 {
		t.Fatalf("after takeover: %+v", st)
	}
	got := executions(t, dir)
	count := map[string]int{}
	for _, s := range got {
		count[s]++
	}
	if want := map[string]int{"fetch": 1, "charge": 1, "render": 2, "publish": 1}; !mapsEqual(count, want) || got[len(got)-1] != "publish" {
		t.Errorf("executions %v, want fetch, charge once, render twice, then publish", got)
	}
	steps, err := r.Steps(context.Background(), runID)
	if err != nil || len(steps) != 4 {
		t.Fatalf("step files %+v (%v)", steps, err)
	}
	wantEpoch := map[string]int64{"fetch": 1, "charge": 1, "render": 2, "publish": 2}
	for _, s := range steps {
		if s.Status != lifecycle.StepCompleted || s.Epoch != wantEpoch[s.StepName] {
			t.Errorf("step %s: %s by epoch %d, want completed by epoch %d", s.StepName, s.Status, s.Epoch, wantEpoch[s.StepName])
		}
	}
	if pub := string(steps[3].Output); !strings.Contains(pub, `charge=`) || !strings.Contains(pub, `render=`) {
		t.Errorf("publish given %s, want charge's and render's outputs", pub)
	}
}
