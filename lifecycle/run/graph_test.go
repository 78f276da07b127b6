package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// outputsOf is a step's Outputs as one JSON object, names sorted.
func outputsOf(in run.StepInput) string {
	names := make([]string, 0, len(in.Outputs))
	for n := range in.Outputs {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n + "=" + string(in.Outputs[n]) + ";")
	}
	return b.String()
}

// echoStep returns as its output the outputs it was given by name.
func echoStep(name string, after ...string) run.Step {
	return run.Step{Name: name, After: after, Resumable: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		out, _ := json.Marshal(outputsOf(in))
		return run.StepOutput{Summary: name, Data: out}, nil
	}}
}

func stepStates(t *testing.T, r *run.Runner, runID string) map[string]lifecycle.StepState {
	t.Helper()
	steps, err := r.Steps(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]lifecycle.StepState{}
	for _, s := range steps {
		m[s.StepName] = s.Status
	}
	return m
}

// Two branches after one step run side by side (each waits until the
// other started) and the join gets both their outputs by name.
func TestGraphParallelBranchesJoin(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	var mu sync.Mutex
	started := map[string]chan struct{}{"left": make(chan struct{}), "right": make(chan struct{})}
	branch := func(name, other string) run.Step {
		return run.Step{Name: name, After: []string{"plan"}, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			if string(in.Outputs["plan"]) != `{"step":"plan"}` || len(in.Outputs) != 1 || string(in.Previous[0]) != `{"step":"plan"}` {
				t.Errorf("%s given %s / %s", name, outputsOf(in), in.Previous)
			}
			mu.Lock()
			close(started[name])
			mu.Unlock()
			if !testSelect(ctx, started[other]) { // the other branch runs meanwhile
				return run.StepOutput{}, ctx.Err()
			}
			return run.StepOutput{Data: json.RawMessage(`"` + name + `-out"`)}, nil
		}}
	}
	agent := run.Agent{Slug: "forked", Steps: []run.Step{
		okStep("plan"), branch("left", "right"), branch("right", "left"), echoStep("join", "left", "right"),
	}}
	r, _ := g.runner("runner-a", nil, agent)
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "forked"})
	if err != nil {
		t.Fatal(err)
	}
	st := g.wait(r, res.RunID, 0, 0)
	if st.Status != "completed" || st.StepsCompleted != 4 || st.StepsTotal != 4 {
		t.Fatalf("status %+v", st)
	}
	steps, err := r.Steps(context.Background(), res.RunID)
	if err != nil || len(steps) != 4 {
		t.Fatalf("steps %+v %v", steps, err)
	}
	join := steps[3]
	want := `"left=\"left-out\";plan={\"step\":\"plan\"};right=\"right-out\";"`
	if join.Status != lifecycle.StepCompleted || string(join.Output) != want || !slices.Equal(join.After, []string{"left", "right"}) {
		t.Errorf("join %+v, output %s, want %s", join, join.Output, want)
	}
	for _, s := range steps[:3] {
		if s.Status != lifecycle.StepCompleted {
			t.Errorf("step %s %s", s.StepName, s.Status)
		}
	}
}

// A step choosing its successor skips the other branch (recorded
// skipped, and so is what depends only on it); the join runs with the
// branch taken.
func TestGraphConditionalNextSkipsTheOtherBranch(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	var ran sync.Map
	mark := func(s run.Step) run.Step {
		inner := s.Run
		s.Run = func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			ran.Store(s.Name, true)
			return inner(ctx, in)
		}
		return s
	}
	route := run.Step{Name: "route", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Data: json.RawMessage(`"small"`), Next: []string{"cheap"}}, nil
	}}
	agent := run.Agent{Slug: "router", Steps: []run.Step{
		route, mark(echoStep("cheap", "route")), mark(echoStep("costly", "route")), mark(echoStep("costly-check", "costly")),
		mark(echoStep("report", "cheap", "costly-check")),
	}}
	r, _ := g.runner("runner-a", nil, agent)
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "router"})
	if err != nil {
		t.Fatal(err)
	}
	st := g.wait(r, res.RunID, 0, 0)
	if st.Status != "completed" || st.StepsCompleted != 5 {
		t.Fatalf("status %+v", st)
	}
	want := map[string]lifecycle.StepState{"route": lifecycle.StepCompleted, "cheap": lifecycle.StepCompleted,
		"costly": lifecycle.StepSkipped, "costly-check": lifecycle.StepSkipped, "report": lifecycle.StepCompleted}
	if got := stepStates(t, r, res.RunID); !mapsEqual(got, want) {
		t.Errorf("steps %v, want %v", got, want)
	}
	for _, name := range []string{"costly", "costly-check"} {
		if _, ok := ran.Load(name); ok {
			t.Errorf("%s ran", name)
		}
	}
	steps, _ := r.Steps(context.Background(), res.RunID)
	if got := string(steps[4].Output); !strings.Contains(got, `cheap=`) || strings.Contains(got, "costly") {
		t.Errorf("report given %s", got)
	}
	if !slices.Equal(steps[0].Next, []string{"cheap"}) {
		t.Errorf("route's record %+v", steps[0])
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A branch failing ends the run failed; the branch running beside it is
// stopped and recorded so, and the join never runs.
func TestGraphFailedBranchStopsTheOthers(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	slowStarted := make(chan struct{})
	slow := run.Step{Name: "slow", After: []string{"plan"}, Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		close(slowStarted)
		testSelect(ctx, make(chan struct{})) // until stopped
		return run.StepOutput{}, ctx.Err()
	}}
	bad := run.Step{Name: "bad", After: []string{"plan"}, Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		testWait(ctx, slowStarted)
		return run.StepOutput{}, lifecycle.NewRunError("VALIDATION_ERROR", "bad input")
	}}
	agent := run.Agent{Slug: "failing", Steps: []run.Step{okStep("plan"), slow, bad, echoStep("join", "slow", "bad")}}
	r, _ := g.runner("runner-a", func(c *run.Config) { c.StepRetries = -1 }, agent)
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "failing"})
	if err != nil {
		t.Fatal(err)
	}
	st := g.wait(r, res.RunID, 0, 0)
	if st.Status != "failed" || st.Error == nil || !strings.HasPrefix(*st.Error, "VALIDATION_ERROR") {
		t.Fatalf("status %+v", st)
	}
	want := map[string]lifecycle.StepState{"plan": lifecycle.StepCompleted, "slow": lifecycle.StepFailed, "bad": lifecycle.StepFailed}
	if got := stepStates(t, r, res.RunID); !mapsEqual(got, want) {
		t.Errorf("steps %v, want %v", got, want)
	}
}

// A graph is checked when the runner is made: After names only steps
// declared before; and a step choosing a step that does not follow it
// fails the run.
func TestGraphValidation(t *testing.T) {
	t.Parallel()
	for name, steps := range map[string][]run.Step{
		"unknown":   {okStep("a"), echoStep("b", "nope")},
		"later":     {echoStep("a", "b"), okStep("b")},
		"itself":    {okStep("a"), echoStep("b", "b")},
		"duplicate": {okStep("a"), echoStep("b", "a", "a")},
	} {
		_, err := run.NewRunner(run.Config{Store: newRig(t, nil).store}, run.Agent{Slug: "g", Steps: steps})
		if !errors.Is(err, run.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	g := newRig(t, nil)
	stray := run.Step{Name: "a", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Next: []string{"c"}}, nil
	}}
	r, _ := g.runner("runner-a", nil, run.Agent{Slug: "stray", Steps: []run.Step{stray, echoStep("b", "a"), echoStep("c", "b")}})
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "stray"})
	if err != nil {
		t.Fatal(err)
	}
	st := g.wait(r, res.RunID, 0, 0)
	if st.Status != "failed" || st.Error == nil || !strings.HasPrefix(*st.Error, "INTERNAL_ERROR") || !strings.Contains(*st.Error, "does not depend on it") {
		t.Fatalf("status %+v", st.Error)
	}
}

// A linear agent's steps get the outputs before them by name too.
func TestLinearStepsGetOutputsByName(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	last := run.Step{Name: "last", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		if got := outputsOf(in); got != `first={"step":"first"};second={"step":"second"};` {
			t.Errorf("outputs %s", got)
		}
		return run.StepOutput{}, nil
	}}
	r, _ := g.runner("runner-a", nil, run.Agent{Slug: "line", Steps: []run.Step{okStep("first"), okStep("second"), last}})
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "line"})
	if err != nil {
		t.Fatal(err)
	}
	if st := g.wait(r, res.RunID, 0, 0); st.Status != "completed" {
		t.Fatalf("status %+v", st)
	}
	steps, _ := r.Steps(context.Background(), res.RunID)
	for _, s := range steps {
		if s.After != nil || s.Next != nil {
			t.Errorf("linear step record %+v", s)
		}
	}
}

// Canceling a graph run stops every branch running; each is recorded
// stopped by the cancel, and the join never runs.
func TestGraphCancelStopsEveryBranch(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	var wg sync.WaitGroup
	wg.Add(2)
	both := make(chan struct{})
	go func() { wg.Wait(); close(both) }()
	block := func(name string) run.Step {
		return run.Step{Name: name, After: []string{"plan"}, Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			wg.Done()
			testSelect(ctx, make(chan struct{})) // until canceled
			return run.StepOutput{}, ctx.Err()
		}}
	}
	agent := run.Agent{Slug: "stoppable", Machine: lifecycle.MachineCancelable,
		Steps: []run.Step{okStep("plan"), block("left"), block("right"), echoStep("join", "left", "right")}}
	r, _ := g.runner("runner-a", nil, agent)
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "stoppable"})
	if err != nil {
		t.Fatal(err)
	}
	until(t, "both branches to run", func() bool { return isClosed(both) })
	if _, err := r.Cancel(context.Background(), res.RunID, lifecycle.ActorGateway, run.CancelRequest{Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	st := g.wait(r, res.RunID, 0, 0)
	if st.Status != "canceled" {
		t.Fatalf("status %+v", st)
	}
	steps, _ := r.Steps(context.Background(), res.RunID)
	if len(steps) != 3 {
		t.Fatalf("steps %+v", steps)
	}
	for _, s := range steps[1:] {
		if s.Status != lifecycle.StepFailed || !strings.HasPrefix(s.Error, "CANCELED") {
			t.Errorf("step %s: %s %q, want failed CANCELED", s.StepName, s.Status, s.Error)
		}
	}
}

// At most 8 steps of one run run at once: of ten branches held until the
// runner is idle, 8 started; the other two run once those end.
func TestGraphBranchesAreBounded(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	var (
		mu      sync.Mutex
		started int
		release = make(chan struct{})
	)
	steps := []run.Step{okStep("plan")}
	var names []string
	for i := range 10 {
		name := "branch-" + string(rune('a'+i))
		names = append(names, name)
		steps = append(steps, run.Step{Name: name, After: []string{"plan"}, Idempotent: true,
			Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				mu.Lock()
				started++
				mu.Unlock()
				testWait(ctx, release)
				return run.StepOutput{}, nil
			}})
	}
	steps = append(steps, echoStep("join", names...))
	r, _ := g.runner("runner-a", nil, run.Agent{Slug: "wide", Steps: steps})
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "wide"})
	if err != nil {
		t.Fatal(err)
	}
	until(t, "branches to start", func() bool { mu.Lock(); defer mu.Unlock(); return started > 0 })
	g.idle()
	mu.Lock()
	n := started
	mu.Unlock()
	// Progress counts plan; the current step is the latest started.
	mid := status(t, r, res.RunID)
	close(release)
	if n != 8 {
		t.Errorf("%d branches ran at once, want 8", n)
	}
	if mid.StepsCompleted != 1 || mid.CurrentStep != "branch-h" {
		t.Errorf("while 8 run: steps_completed %d, current_step %q; want 1, branch-h", mid.StepsCompleted, mid.CurrentStep)
	}
	if st := g.wait(r, res.RunID, 0, 0); st.Status != "completed" || st.StepsCompleted != 12 {
		t.Fatalf("status %+v", st)
	}
}

// A runner lost in one branch of a graph after the other completed: the
// next runner keeps what completed (resumable), runs the lost branch again
// when it is idempotent, and fails the run when it is not.
func TestGraphTakeover(t *testing.T) {
	t.Parallel()
	for i, tt := range []struct {
		name       string
		idempotent bool
		wantStatus string
		wantError  string
		wantLeft   int
	}{
		{name: "idempotent-replays", idempotent: true, wantStatus: "completed", wantLeft: 2},
		{name: "not-idempotent-fails", wantStatus: "failed", wantError: "RUN_RESUME_FAILED: runner lost in step left, which is not idempotent", wantLeft: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, nil)
			slug := fmt.Sprintf("graph-takeover-%d", i)
			var counts countingStep
			mk := func(owner string) run.Agent {
				count := func(s run.Step) run.Step {
					inner := s.Run
					s.Run = func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
						counts.inc(s.Name)
						return inner(ctx, in)
					}
					return s
				}
				left := run.Step{Name: "left", After: []string{"plan"}, Idempotent: tt.idempotent, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
					if owner == "a" {
						testSelect(ctx, make(chan struct{})) // until runner a is lost
						return run.StepOutput{}, ctx.Err()
					}
					return run.StepOutput{Data: json.RawMessage(`"left"`)}, nil
				}}
				plan := okStep("plan")
				plan.Resumable = true
				return run.Agent{Slug: slug, Steps: []run.Step{count(plan), count(left), count(echoStep("right", "plan")), count(echoStep("join", "left", "right"))}}
			}
			a, stopA := g.runner("a", nil, mk("a"))
			id := submit(t, a, slug)
			// left and right start together (one pass starts every step
			// due), so left runs once right's file is written.
			until(t, "right to complete in runner a", func() bool {
				return stepStates(t, a, id)["right"] == lifecycle.StepCompleted
			})
			stopA() // runner a is lost in left; its lease stays behind
			b, _ := g.runner("b", nil, mk("b"))
			st := g.wait(b, id, 30*time.Second, 10*time.Minute)
			if st.Status != tt.wantStatus || deref(st.Error) != orNil(tt.wantError) || st.ResumeCount != 1 {
				t.Fatalf("after takeover: %s %v resume %d", st.Status, deref(st.Error), st.ResumeCount)
			}
			if counts.get("plan") != 1 || counts.get("right") != 1 || counts.get("left") != tt.wantLeft {
				t.Errorf("ran plan %d, right %d, left %d times; want 1, 1, %d", counts.get("plan"), counts.get("right"), counts.get("left"), tt.wantLeft)
			}
			if tt.wantStatus != "completed" {
				return
			}
			steps, _ := b.Steps(context.Background(), id)
			if join := string(steps[3].Output); !strings.Contains(join, `left=\"left\"`) || !strings.Contains(join, "right=") {
				t.Errorf("join given %s", join)
			}
		})
	}
}
