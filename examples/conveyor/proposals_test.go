package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestProposalsCommands: a run's step proposes a file; the CLI lists the
// pending proposal, shows it, applies it as the gateway (the frontend may
// not), and the list is empty after.
func TestProposalsCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New()
	propose := func(context.Context, run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Files: map[string][]byte{"proposal.json": []byte(`{}`)}, Propose: []string{"proposal.json"}}, nil
	}
	r, err := run.NewRunner(run.Config{Store: store, Logger: quiet, PollInterval: 20 * time.Millisecond},
		run.Agent{Slug: "proposer", Steps: []run.Step{{Name: "create-proposal", Run: propose}}})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, r, store, httpapi.Config{})

	code, out, errs := conveyor(t, url, "submit", "proposer", "-watch")
	if code != 0 || !strings.Contains(out, "completed") {
		t.Fatalf("submit: %d %s %s", code, out, errs)
	}
	runID := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	st, err := r.Status(ctx, runID)
	if err != nil || len(st.ProposalsCreated) != 1 {
		t.Fatalf("status %+v, %v", st, err)
	}
	id := st.ProposalsCreated[0]
	steps := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"proposals"}, 0, id},
		{[]string{"proposals", "show", id}, 0, `"status": "pending"`},
		{[]string{"-actor", string(lifecycle.ActorFrontend), "proposals", "apply", id}, 1, "FORBIDDEN"},
		{[]string{"proposals", "apply", id, "-reason", "merged"}, 0, `"status": "applied"`},
		{[]string{"proposals", "reject", id}, 1, "CONFLICT"},
		{[]string{"proposals", "frobnicate"}, 2, "proposals [pending]"},
	}
	for _, s := range steps {
		code, out, errs := conveyor(t, url, s.args...)
		got := out
		if s.code != 0 {
			got = errs
		}
		if code != s.code || !strings.Contains(got, s.want) {
			t.Fatalf("%v: exit %d (want %d), %q not in\n%s%s", s.args, code, s.code, s.want, out, errs)
		}
	}
	if _, out, _ := conveyor(t, url, "proposals"); strings.Contains(out, id) {
		t.Fatalf("an applied proposal is still listed:\n%s", out)
	}
}
