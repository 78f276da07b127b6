package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestRunInputRoute: GET /runs/{runId}/input answers the input a run was
// submitted with, null for none, and RUN_NOT_FOUND for an unknown run.
func TestRunInputRoute(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	c := g.client(lifecycle.ActorGateway)
	op := client.Operator{Client: g.client(lifecycle.ActorFrontend)}
	with, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick", Input: json.RawMessage(`{"topic":"violin"}`)})
	if err != nil {
		t.Fatal(err)
	}
	in, err := op.RunInput(ctx, with.RunID)
	if err != nil || string(in) != `{"topic":"violin"}` {
		t.Fatalf("RunInput = %s, %v", in, err)
	}
	without, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"})
	if err != nil {
		t.Fatal(err)
	}
	if in, err := op.RunInput(ctx, without.RunID); err != nil || in != nil {
		t.Fatalf("RunInput of a run without input = %s, %v", in, err)
	}
	_, err = op.RunInput(ctx, "run_2026-01-01_000000_nope")
	apiError(t, err, http.StatusNotFound, codes.RunNotFound)
}
