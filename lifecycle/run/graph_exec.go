package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The execution of a graph agent's run: one execution under the run's
// lease, one goroutine per step running (at most graphBranches), and this
// goroutine, the coordinator, the only one that writes (start markers,
// step files, outputs, the status).

// errBranchEnded stops the steps still running when the run ends with
// another step (it failed, or a write did).
var errBranchEnded = errors.New("run: another step ended the run")

// branchResult is how one step's attempts went, sent to the coordinator.
type branchResult struct {
	i        int
	started  time.Time
	out      StepOutput
	attempts int
	err      error
}

// graphExec is the coordinator's state for one execution.
type graphExec struct {
	x       *execution
	r       *graphRun
	doc     lifecycle.RunStatus
	input   json.RawMessage
	results chan branchResult // buffered: a step's send never blocks
	running map[int]bool
	latest  []int // the steps running, in the order they started
	files   []string
	// proposals are the settled steps' not yet counted.
	proposals []string
	dirty     bool // a step settled since the last count
}

// executeGraph runs the steps of a graph agent's run not yet done.
// runCtx carries the stops; ctx is used for the writes.
func executeGraph(runCtx, ctx context.Context, x *execution) outcome {
	doc := x.w.snapshot()
	g := &graphExec{x: x, r: newGraphRun(x.agent.graph, x.agent.Steps), doc: doc,
		results: make(chan branchResult, graphBranches), running: map[int]bool{}}
	if err := g.plan(ctx); err != nil {
		return x.countFailure(ctx, err)
	}
	input, end := x.loadInput(ctx, doc)
	if end != nil {
		return *end
	}
	g.input = input
	return g.loop(runCtx, ctx)
}

// loop starts the steps that are due, counts what settled and takes the
// next result, until no step runs. Once the run's end is known (a stop,
// a failure) nothing more starts; the steps running are stopped and
// their ends recorded, and the first end stands.
func (g *graphExec) loop(runCtx, ctx context.Context) outcome {
	x := g.x
	bctx, bcancel := context.WithCancelCause(runCtx)
	defer bcancel(nil)
	var end *outcome
	ended := func(o *outcome) {
		if o != nil && end == nil {
			end = o
			bcancel(errBranchEnded)
		}
	}
	for {
		if end == nil {
			ended(g.advance(runCtx, bctx, ctx))
		}
		if end == nil && g.dirty && g.r.settledCount() < len(g.r.steps) {
			if err := g.count(ctx); err != nil {
				o := x.countFailure(ctx, err)
				ended(&o)
			}
		}
		if len(g.running) == 0 {
			break
		}
		resume := activity.Wait(ctx, x.e.cfg.Clock, func() bool { return len(g.results) > 0 })
		res := <-g.results
		resume()
		ended(g.settle(runCtx, bctx, ctx, res))
	}
	// The ending write counts the last ones, whatever the end: a branch
	// settled after another ended the run may have created one.
	x.lastProposals = g.proposals
	if end != nil {
		return *end
	}
	return outcome{kind: done, files: g.files}
}

// advance records the steps now skipped and starts those now due, as
// many as graphBranches allows. It returns the run's end when the run
// stopped or a write failed.
func (g *graphExec) advance(runCtx, bctx, ctx context.Context) *outcome {
	x := g.x
	if cause := context.Cause(runCtx); cause != nil {
		o := stoppedBy(cause)
		return &o
	}
	for {
		run, skip := g.r.due()
		for _, i := range skip {
			if err := g.writeSkip(ctx, i); err != nil {
				o := x.writeFailure(ctx, err)
				return &o
			}
		}
		if len(skip) > 0 {
			continue // a skip may settle the last dependency of another step
		}
		for _, i := range run {
			if len(g.running) >= graphBranches {
				return nil
			}
			if o := g.start(bctx, ctx, i); o != nil {
				return o
			}
		}
		return nil
	}
}

// start marks step i started (when it is not idempotent) and runs it in
// its own goroutine.
func (g *graphExec) start(bctx, ctx context.Context, i int) *outcome {
	x := g.x
	s := g.r.steps[i]
	if end := x.markStart(ctx, i, s); end != nil {
		return end
	}
	prev, outs := g.r.input(i)
	in := StepInput{RunID: g.doc.RunID, AgentSlug: g.doc.AgentSlug, Step: i + 1, Input: g.input, Previous: prev, Outputs: outs}
	g.r.state[i] = lifecycle.StepRunning
	g.running[i] = true
	g.latest = append(g.latest, i)
	started := x.e.now()
	sctx := activity.Start(bctx, x.e.cfg.Clock)
	go func() {
		sctx, end := activity.Enter(sctx, x.e.cfg.Clock)
		defer end() // after the send: the coordinator is ready before the count drops
		out, attempts, err := x.runStep(sctx, s, in)
		g.results <- branchResult{i: i, started: started, out: out, attempts: attempts, err: err}
	}()
	return nil
}

// settle records how a step ended: its output files and proposals, then
// its step file (writeStepEnd).
// It returns the run's end when the step failed or stopped, or a write
// failed.
func (g *graphExec) settle(runCtx, bctx, ctx context.Context, res branchResult) *outcome {
	x := g.x
	s := g.r.steps[res.i]
	delete(g.running, res.i)
	for k, i := range g.latest {
		if i == res.i {
			g.latest = append(g.latest[:k], g.latest[k+1:]...)
			break
		}
	}
	stepErr := res.err
	if stepErr != nil && isStop(runCtx) && !isTimeout(runCtx) && context.Cause(runCtx) != errCanceled {
		o := stoppedBy(context.Cause(runCtx))
		return &o
	}
	if stepErr == nil {
		stepErr = g.r.checkOutput(res.i, res.out)
	}
	if stepErr == nil {
		stepErr = nameProposals(StepInput{RunID: g.doc.RunID, Step: res.i + 1}, &res.out)
	}
	switch {
	case stepErr != nil && isStop(runCtx):
		stepErr = stoppedStepError(runCtx, s, stepErr)
	case stepErr != nil && context.Cause(bctx) == errBranchEnded:
		stepErr = &lifecycle.RunError{Code: codes.Canceled, Permanent: true, Err: stepErr,
			Message: fmt.Sprintf("step %s stopped: another step ended the run", s.Name)}
	}
	names, end := x.writeStepEnd(runCtx, ctx, res.i, s, res.started, res.out, res.attempts, stepErr, func(rec *lifecycle.StepRecord) {
		rec.After = s.After
		if stepErr == nil {
			rec.Next = res.out.Next
		}
	})
	if stepErr != nil {
		g.r.state[res.i] = lifecycle.StepFailed
	}
	if end != nil {
		return end
	}
	g.files = append(g.files, names...)
	g.r.state[res.i], g.r.outputs[res.i], g.r.next[res.i] = lifecycle.StepCompleted, res.out.Data, res.out.Next
	g.proposals = appendNew(g.proposals, res.out.Proposals...)
	g.dirty = true
	return nil
}

// writeSkip writes the step file of a skipped step (fenced, like every
// step file).
func (g *graphExec) writeSkip(ctx context.Context, i int) error {
	x := g.x
	s := g.r.steps[i]
	now := x.e.now()
	rec := lifecycle.StepRecord{StepNumber: i + 1, StepName: s.Name, Status: lifecycle.StepPending, FinishedAt: &now,
		Resumable: s.Resumable, Idempotent: s.Idempotent, Epoch: x.epoch, After: s.After}
	if _, err := machine.RunStep().Fire(context.Background(), &rec, machine.EventSkip, lifecycle.ActorOrchestration); err != nil {
		return err
	}
	if err := x.files.writeStep(ctx, rec); err != nil {
		return err
	}
	x.records[rec.StepNumber] = rec
	g.dirty = true
	return nil
}

// count writes the status that counts the settled steps (a skipped one
// counted as done) and names as current step the latest started of those
// running. The completing write counts the last ones.
func (g *graphExec) count(ctx context.Context) error {
	x := g.x
	f := x.flow
	n := g.r.settledCount()
	current := ""
	if len(g.latest) > 0 {
		current = g.r.steps[g.latest[len(g.latest)-1]].Name
	}
	proposals := g.proposals
	err := x.w.apply(ctx, bySystem(), func(ctx context.Context, d *lifecycle.RunStatus) error {
		if f.stepDone != "" {
			if err := f.fire(ctx, d, f.stepDone, lifecycle.ActorOrchestration); err != nil {
				return err
			}
		}
		if n > d.StepsCompleted {
			d.StepsCompleted = n
		}
		if current != "" {
			d.CurrentStep = current
		}
		d.ProposalsCreated = appendNew(d.ProposalsCreated, proposals...)
		return nil
	})
	if err == nil {
		g.dirty, g.proposals = false, nil
	}
	return err
}
