package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestIdempotencyKeyIsTheCallers: an API caller's key is always in its own
// api:{actor}: namespace (seed 004 §3.2: "combined with authenticated client
// ID"). A caller that sends a key naming another client, or another
// source's scheme, must not occupy that key: the owner of the key (another
// actor over HTTP, or the in-process scheduler or webhook handler calling
// Runner.Submit) still gets its own new run, not a conflict and not the
// caller's run.
func TestIdempotencyKeyIsTheCallers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// The gateway's header value, with input {"by":"gateway"}.
		claim string
		// The key's owner then submits input {"by":"owner"} under its key:
		// over HTTP as an actor with X-Request-ID ownerToken/ownerID, or
		// in process with ownerKey.
		ownerToken, ownerID string
		ownerKey            string
	}{
		{name: "another actor's api key", claim: "api:admin:req-1", ownerToken: "tok-admin", ownerID: "req-1"},
		{name: "the scheduler's key", claim: "scheduler:nightly:2026-01-01T00:00:00Z", ownerKey: "scheduler:nightly:2026-01-01T00:00:00Z"},
		{name: "a webhook's key", claim: "github:delivery-7", ownerKey: "github:delivery-7"},
		{name: "a slack key", claim: "slack:T1:123.456", ownerKey: "slack:T1:123.456"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, rigOpts{})
			ctx := context.Background()
			status, _, body := g.raw("POST", "/agents/run", "tok-gateway", "application/json",
				[]byte(`{"agent_slug":"quick","input":{"by":"gateway"}}`), map[string]string{"X-Idempotency-Key": tt.claim})
			if status != http.StatusCreated {
				t.Fatalf("gateway's submit: %d %s", status, body)
			}
			var claimed struct {
				RunID string `json:"run_id"`
			}
			if err := json.Unmarshal(body, &claimed); err != nil {
				t.Fatal(err)
			}
			var ownerRun string
			if tt.ownerToken != "" {
				status, _, body = g.raw("POST", "/agents/run", tt.ownerToken, "application/json",
					[]byte(`{"agent_slug":"quick","input":{"by":"owner"}}`), map[string]string{"X-Request-ID": tt.ownerID})
				if status != http.StatusCreated {
					t.Fatalf("the key's owner got %d %s, want 201 and a run of its own", status, body)
				}
				var a struct {
					RunID string `json:"run_id"`
				}
				_ = json.Unmarshal(body, &a)
				ownerRun = a.RunID
			} else {
				res, err := g.runner.Submit(ctx, run.SubmitRequest{AgentSlug: "quick", Input: json.RawMessage(`{"by":"owner"}`), IdempotencyKey: tt.ownerKey})
				if errors.Is(err, run.ErrIdempotencyConflict) || err != nil {
					t.Fatalf("the key's owner: %v, want a run of its own", err)
				}
				if res.Duplicate {
					t.Fatalf("the key's owner got the gateway's run %s as a duplicate", res.RunID)
				}
				ownerRun = res.RunID
			}
			if ownerRun == claimed.RunID {
				t.Errorf("the owner's run is the gateway's %s", ownerRun)
			}
			// The gateway's own retry is still a duplicate of its run.
			status, _, body = g.raw("POST", "/agents/run", "tok-gateway", "application/json",
				[]byte(`{"agent_slug":"quick","input":{"by":"gateway"}}`), map[string]string{"X-Idempotency-Key": tt.claim})
			if status != http.StatusOK || string(body) != `{"run_id":"`+claimed.RunID+`","duplicate":true}`+"\n" {
				t.Errorf("gateway's retry: %d %s, want its run as a duplicate", status, body)
			}
		})
	}
}
