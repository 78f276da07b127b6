package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// The approve and events routes carry a payload to the run's next step:
// POST /runs/{id}/approve {"reason", "payload"} and POST /runs/{id}/events
// {"type", "payload"}, sent as raw bodies and through the Go client; a
// payload that is not JSON or too large is refused before anything is
// written.
func TestPayloadRoutes(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{running: true})
	ctx := context.Background()
	c := g.client(lifecycle.ActorGateway)
	submitParked := func(agent, want string) string {
		t.Helper()
		res, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: agent})
		if err != nil {
			t.Fatal(err)
		}
		if st := g.waitStatus(res.RunID); st.Status != want {
			t.Fatalf("status %s, want %s", st.Status, want)
		}
		return res.RunID
	}
	given := func(runID string) run.StepInput {
		t.Helper()
		if st := g.waitStatus(runID); st.Status != string(machine.ApprovalCompleted) {
			t.Fatalf("run %s %s, want completed", runID, st.Status)
		}
		in, ok := g.inputs.Load(runID)
		if !ok {
			t.Fatalf("run %s: the step after the wait did not run", runID)
		}
		return in.(run.StepInput)
	}
	awaiting, waiting := string(machine.ApprovalAwaitingApproval), string(machine.ApprovalWaitingExternal)

	t.Run("approve raw", func(t *testing.T) {
		id := submitParked("gate", awaiting)
		code, _, body := g.raw("POST", "/runs/"+id+"/approve", "tok-gateway", "application/json",
			[]byte(`{"reason": "ship it", "payload": {"title": "v2", "n": 12345678901234567890}}`), nil)
		if code != http.StatusOK {
			t.Fatalf("approve: %d %s", code, body)
		}
		var st lifecycle.RunStatus
		if err := json.Unmarshal(body, &st); err != nil || st.Approval == nil || st.Approval.PayloadBytes == 0 {
			t.Fatalf("approve answered %s (%v)", body, err)
		}
		in := given(id)
		if in.Approval == nil || in.Approval.Reason != "ship it" || in.Approval.DecidedBy != "gateway" ||
			string(in.Approval.Payload) != `{"title":"v2","n":12345678901234567890}` {
			t.Errorf("publish was given %+v", in.Approval)
		}
	})
	t.Run("approve client", func(t *testing.T) {
		id := submitParked("gate", awaiting)
		if _, err := c.Decide(ctx, id, true, "owner", "ok", json.RawMessage(`["a"]`)); err != nil {
			t.Fatal(err)
		}
		if in := given(id); in.Approval == nil || in.Approval.DecidedBy != "owner" || string(in.Approval.Payload) != `["a"]` {
			t.Errorf("publish was given %+v", in.Approval)
		}
	})
	t.Run("event raw", func(t *testing.T) {
		id := submitParked("ext", waiting)
		code, _, body := g.raw("POST", "/runs/"+id+"/events", "tok-gateway", "application/json",
			[]byte(`{"type": "reply", "id": "msg-1", "source": "mail", "payload": {"text": "yes"}}`), nil)
		if code != http.StatusOK {
			t.Fatalf("deliver: %d %s", code, body)
		}
		if in := given(id); in.Event == nil || in.Event.ID != "msg-1" || string(in.Event.Payload) != `{"text":"yes"}` {
			t.Errorf("finish was given %+v", in.Event)
		}
	})
	t.Run("event client", func(t *testing.T) {
		id := submitParked("ext", waiting)
		if _, err := c.Deliver(ctx, id, "reply", "msg-2", "mail", json.RawMessage(`7`)); err != nil {
			t.Fatal(err)
		}
		if in := given(id); in.Event == nil || in.Event.Source != "mail" || string(in.Event.Payload) != `7` {
			t.Errorf("finish was given %+v", in.Event)
		}
	})
	t.Run("refused", func(t *testing.T) {
		id := submitParked("gate", awaiting)
		big := `{"payload": "` + strings.Repeat("x", codes.MaxDocumentBytes) + `"}`
		for _, tt := range []struct {
			name, body string
			status     int
			code       string
		}{
			{"not JSON", `{"payload": {"a": }`, http.StatusBadRequest, codes.InvalidRequest},
			{"lone surrogate", `{"payload": "\ud800"}`, http.StatusBadRequest, codes.InvalidInput},
			{"too large", big, http.StatusRequestEntityTooLarge, codes.InputTooLarge},
		} {
			code, _, body := g.raw("POST", "/runs/"+id+"/approve", "tok-gateway", "application/json", []byte(tt.body), nil)
			var e struct{ Code string }
			_ = json.Unmarshal(body, &e)
			if code != tt.status || e.Code != tt.code {
				t.Errorf("%s: %d %s, want %d %s", tt.name, code, body, tt.status, tt.code)
			}
		}
		if st, err := c.Status(ctx, id); err != nil || st.Status != awaiting || st.Approval.Decision != "" {
			t.Errorf("a refused payload moved the run: %+v %v", st, err)
		}
	})
}
