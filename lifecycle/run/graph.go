package run

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// A graph agent's steps (docs/design.md#runs, "Graphs"): which steps each
// one waits for, which wait for it, and the state of one run's steps as
// its step files say.

// graph is the shape of a graph agent's steps, by position. Dependencies
// are always declared earlier, so position order is a topological order
// and the graph has no cycle.
type graph struct {
	after [][]int // the steps each one depends on
	succ  [][]int // the steps depending on each one
	// ancestors are the steps each one depends on, directly or through
	// others, in position order: whose outputs it is given.
	ancestors [][]int
	index     map[string]int
}

// graphBranches bounds the steps of one run that run at once.
const graphBranches = 8

// newGraph is the graph of agent slug's steps, nil when no step declares
// After (a linear agent). Each name in After must be a step declared
// before, given once.
func newGraph(slug string, steps []Step) (*graph, error) {
	if !slices.ContainsFunc(steps, func(s Step) bool { return len(s.After) > 0 }) {
		return nil, nil
	}
	g := &graph{after: make([][]int, len(steps)), succ: make([][]int, len(steps)),
		ancestors: make([][]int, len(steps)), index: map[string]int{}}
	for i, s := range steps {
		anc := map[int]bool{}
		for _, name := range s.After {
			j, ok := g.index[name]
			if !ok {
				return nil, fmt.Errorf("%w: agent %s step %s: After names %q, which is not a step declared before it", ErrInvalidConfig, slug, s.Name, name)
			}
			if slices.Contains(g.after[i], j) {
				return nil, fmt.Errorf("%w: agent %s step %s: After names %q twice", ErrInvalidConfig, slug, s.Name, name)
			}
			g.after[i] = append(g.after[i], j)
			g.succ[j] = append(g.succ[j], i)
			anc[j] = true
			for _, k := range g.ancestors[j] {
				anc[k] = true
			}
		}
		for k := range anc {
			g.ancestors[i] = append(g.ancestors[i], k)
		}
		slices.Sort(g.ancestors[i])
		g.index[s.Name] = i
	}
	return g, nil
}

// graphRun is the state of one run's steps: pending ("") until it runs
// (running), then completed, failed or skipped.
type graphRun struct {
	g       *graph
	steps   []Step
	state   []lifecycle.StepState
	outputs []json.RawMessage
	next    [][]string // what each completed step chose (StepOutput.Next)
}

func newGraphRun(g *graph, steps []Step) *graphRun {
	return &graphRun{g: g, steps: steps, state: make([]lifecycle.StepState, len(steps)),
		outputs: make([]json.RawMessage, len(steps)), next: make([][]string, len(steps))}
}

func settled(s lifecycle.StepState) bool {
	return s == lifecycle.StepCompleted || s == lifecycle.StepSkipped
}

// chose tells whether completed step j lets step i run.
func (r *graphRun) chose(j, i int) bool {
	return r.state[j] == lifecycle.StepCompleted && (len(r.next[j]) == 0 || slices.Contains(r.next[j], r.steps[i].Name))
}

// due sorts the pending steps whose dependencies are all settled, in
// position order: those to run (a dependency completed and chose them,
// or they have none) and those to skip. A skip settles its step at once,
// so the steps after it are judged with it.
func (r *graphRun) due() (run, skip []int) {
	for i := range r.steps {
		if r.state[i] != "" {
			continue
		}
		live, ready := len(r.g.after[i]) == 0, true
		for _, j := range r.g.after[i] {
			ready = ready && settled(r.state[j])
			live = live || r.chose(j, i)
		}
		switch {
		case !ready:
		case live:
			run = append(run, i)
		default:
			r.state[i] = lifecycle.StepSkipped
			skip = append(skip, i)
		}
	}
	return run, skip
}

// settledCount is the steps done, a skipped one counted as done: the
// run's steps_completed.
func (r *graphRun) settledCount() int {
	n := 0
	for _, s := range r.state {
		if settled(s) {
			n++
		}
	}
	return n
}

// input is what step i is given of the steps before it: the outputs of
// those it depends on, directly or not, that completed.
func (r *graphRun) input(i int) ([]json.RawMessage, map[string]json.RawMessage) {
	prev := make([]json.RawMessage, i)
	outs := map[string]json.RawMessage{}
	for _, j := range r.g.ancestors[i] {
		if r.state[j] == lifecycle.StepCompleted {
			prev[j] = r.outputs[j]
			outs[r.steps[j].Name] = r.outputs[j]
		}
	}
	return prev, outs
}

// checkOutput refuses what a graph step may not return: a wait, or a
// successor that does not depend on it.
func (r *graphRun) checkOutput(i int, out StepOutput) error {
	s := r.steps[i]
	if out.Await != nil {
		return &lifecycle.RunError{Code: codes.InternalError, Permanent: true,
			Message: fmt.Sprintf("step %s asked the run to wait; a graph agent cannot wait", s.Name)}
	}
	for _, name := range out.Next {
		j, ok := r.g.index[name]
		if !ok || !slices.Contains(r.g.succ[i], j) {
			return &lifecycle.RunError{Code: codes.InternalError, Permanent: true,
				Message: fmt.Sprintf("step %s chose %q as its next step, which does not depend on it", s.Name, name)}
		}
	}
	return nil
}

// plan reads the step files of a graph run that made progress and
// sets what they prove done. Each step is judged on its own, by the rules
// of docs/spec.md#recovery for one step: a completed step is kept with
// its output and choice when resumable (or counted before a wait), run
// again when idempotent, else the run fails RUN_RESUME_FAILED; a step
// started and not completed runs again when idempotent, else the run
// fails (RUN_ORPHANED when nothing completed). A skip is not trusted but
// judged again from the steps it depends on. Steps with no file are
// pending: a step that is not idempotent gets its start marker before
// it runs, so without one it never started.
func (g *graphExec) plan(ctx context.Context) error {
	x, doc, r := g.x, g.doc, g.r
	if doc.StepsCompleted == 0 && !x.resumed {
		return nil
	}
	files, err := x.e.readSteps(ctx, doc.AgentSlug, doc.RunID)
	if err != nil {
		return err
	}
	recs := map[int]lifecycle.StepRecord{}
	anyDone := false
	for _, f := range files {
		recs[f.StepNumber] = f
		anyDone = anyDone || f.Status == lifecycle.StepCompleted
	}
	var lost []string
	for i, s := range r.steps {
		rec, ok := recs[i+1]
		switch {
		case !ok || rec.Status == lifecycle.StepSkipped:
		case rec.Status == lifecycle.StepCompleted && (s.Resumable || !x.resumed):
			r.state[i], r.outputs[i], r.next[i] = lifecycle.StepCompleted, rec.Output, rec.Next
			x.records[i+1] = rec
		case s.Idempotent:
		case rec.Status == lifecycle.StepCompleted:
			return lifecycle.NewRunError(codes.RunResumeFailed, "step %s completed before the takeover but is neither resumable nor idempotent", s.Name)
		default:
			lost = append(lost, s.Name)
		}
	}
	switch {
	case len(lost) > 0 && !anyDone:
		return lifecycle.NewRunError(codes.RunOrphaned, "runner lost in step %s, which is not idempotent, with no checkpoint", lost[0])
	case len(lost) > 0:
		return lifecycle.NewRunError(codes.RunResumeFailed, "runner lost in step %s, which is not idempotent", lost[0])
	}
	return nil
}

// byName gives a linear run's step outputs by the names of steps.
func byName(steps []Step, outputs []json.RawMessage) map[string]json.RawMessage {
	m := make(map[string]json.RawMessage, len(steps))
	for i, s := range steps {
		m[s.Name] = outputs[i]
	}
	return m
}
