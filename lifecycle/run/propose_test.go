package run_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/proposals"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// TestStepProposes: a step that proposes one of its files gets a pending
// proposal record whose content is that file, and the run's
// proposals_created names the records, from a middle step and from the
// last, and from the branches of a graph; a step that proposes a file it
// did not write fails the run.
func TestStepProposes(t *testing.T) {
	t.Parallel()
	proposing := func(name string) run.Step {
		return run.Step{Name: "propose-" + name[:5], Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Files: map[string][]byte{name: []byte(`{"edit":1}`), "notes.txt": []byte("n")}, Propose: []string{name}}, nil
		}}
	}
	after := func(s run.Step, deps ...string) run.Step { s.After = deps; return s }
	tests := []struct {
		name   string
		steps  []run.Step
		status string
		n      int
	}{
		{"middle and last", []run.Step{okStep("load-context"), proposing("draft.json"), proposing("final.json")}, "completed", 2},
		// Two parallel branches of a graph, each proposing.
		{"graph branches", []run.Step{okStep("load-context"), after(proposing("draft.json"), "load-context"), after(proposing("final.json"), "load-context")}, "completed", 2},
		{"a file not written", []run.Step{{Name: "bad", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Propose: []string{"missing.json"}}, nil
		}}}, "failed", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, nil)
			r, _ := g.runner("runner-a", nil, run.Agent{Slug: "archivist", Steps: tc.steps})
			ctx := context.Background()
			res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "archivist", Input: json.RawMessage(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			st := g.wait(r, res.RunID, 0, 0)
			if st.Status != tc.status || len(st.ProposalsCreated) != tc.n {
				t.Fatalf("status %s, proposals %v", st.Status, st.ProposalsCreated)
			}
			ps := proposals.New(g.store, nil, "", nil)
			for _, id := range st.ProposalsCreated {
				p, err := ps.Get(ctx, id)
				if err != nil {
					t.Fatalf("proposals_created names %s, which has no record: %v", id, err)
				}
				if p.RunID != res.RunID || p.AgentSlug != "archivist" || p.Status != lifecycle.ProposalPending || p.SchemaVersion != 1 {
					t.Errorf("proposal %+v", p)
				}
				if b, _, err := g.store.Get(ctx, p.ContentKey); err != nil || string(b) != `{"edit":1}` {
					t.Errorf("content at %s: %q, %v", p.ContentKey, b, err)
				}
			}
			page, _, err := ps.Pending(ctx, 0, "")
			if err != nil || len(page) != tc.n {
				t.Fatalf("pending %d, %v", len(page), err)
			}
		})
	}
}

// putOrder records the keys of every Put, in order.
type putOrder struct {
	driver.Store
	mu   sync.Mutex
	keys []string
}

func (p *putOrder) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	p.mu.Lock()
	p.keys = append(p.keys, key)
	p.mu.Unlock()
	return p.Store.Put(ctx, key, value, cond)
}

// TestProposalsBeforeTheStepFile: a completed step's output file and its
// proposal's record are written before the step file that names them, so
// a crash between cannot leave a completed step (kept by a takeover
// without running again) naming records that do not exist.
func TestProposalsBeforeTheStepFile(t *testing.T) {
	t.Parallel()
	for _, graph := range []bool{false, true} {
		rec := &putOrder{Store: memstore.NewDriver()}
		g := newRig(t, storage.New(rec))
		first, second := okStep("load-context"), run.Step{Name: "draft", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{Files: map[string][]byte{"draft.json": []byte(`{}`)}, Propose: []string{"draft.json"}}, nil
		}}
		if graph {
			second.After = []string{"load-context"}
		}
		r, _ := g.runner("runner-a", nil, run.Agent{Slug: "archivist", Steps: []run.Step{first, second}})
		res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "archivist"})
		if err != nil {
			t.Fatal(err)
		}
		if st := g.wait(r, res.RunID, 0, 0); st.Status != "completed" || len(st.ProposalsCreated) != 1 {
			t.Fatalf("graph %v: %s, proposals %v", graph, st.Status, st.ProposalsCreated)
		}
		rec.mu.Lock()
		at := func(match func(string) bool) int { return slices.IndexFunc(rec.keys, match) }
		// The last put of the step file: a step that is not idempotent has
		// its start marker written there first.
		stepFile := -1
		for i, k := range rec.keys {
			if strings.Contains(k, "/steps/") && strings.HasSuffix(k, "-draft.json") {
				stepFile = i
			}
		}
		output := at(func(k string) bool { return strings.HasSuffix(k, "/output/draft.json") })
		proposal := at(func(k string) bool { return strings.HasPrefix(k, "proposals/") })
		rec.mu.Unlock()
		if stepFile < 0 || output < 0 || proposal < 0 || output > stepFile || proposal > stepFile {
			t.Errorf("graph %v: step file put #%d, output #%d, proposal #%d: both must come first", graph, stepFile, output, proposal)
		}
	}
}

// TestFailedGraphNamesItsProposals: a branch that proposed and returned
// while another branch's failure was being written (the failure's step
// file held until then) settles after the run ended; its proposal record
// is still named by the failed run's proposals_created.
func TestFailedGraphNamesItsProposals(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	badReturned, proposed := make(chan struct{}), make(chan struct{})
	held := &holdKey{Store: g.tracked(), suffix: "-bad.json", open: proposed}
	prop := run.Step{Name: "prop", After: []string{"plan"}, Idempotent: true, Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
		testWait(ctx, badReturned)
		defer close(proposed)
		return run.StepOutput{Files: map[string][]byte{"draft.json": []byte(`{}`)}, Propose: []string{"draft.json"}}, nil
	}}
	bad := run.Step{Name: "bad", After: []string{"plan"}, Idempotent: true, Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
		defer close(badReturned)
		return run.StepOutput{}, lifecycle.NewRunError("VALIDATION_ERROR", "bad input")
	}}
	agent := run.Agent{Slug: "halfway", Steps: []run.Step{okStep("plan"), prop, bad, echoStep("join", "prop", "bad")}}
	r, _ := g.around(storage.New(held)).runner("runner-a", func(c *run.Config) { c.StepRetries = -1 }, agent)
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: agent.Slug})
	if err != nil {
		t.Fatal(err)
	}
	st := g.wait(r, res.RunID, 0, 0)
	if st.Status != "failed" {
		t.Fatalf("status %+v", st)
	}
	var records []string
	for key, err := range g.store.List(context.Background(), layout.ProposalsPrefix) {
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, key)
	}
	if len(records) != len(st.ProposalsCreated) {
		t.Fatalf("proposal records %v, the run names %v", records, st.ProposalsCreated)
	}
}

// holdKey holds every Put of a key ending in suffix until open is closed.
type holdKey struct {
	*storage.Store
	suffix string
	open   <-chan struct{}
}

func (h *holdKey) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if strings.HasSuffix(key, h.suffix) {
		testWait(ctx, h.open)
	}
	return h.Store.Put(ctx, key, value, cond)
}
