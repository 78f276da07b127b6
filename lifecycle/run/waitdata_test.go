package run_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// seenInputs records what each step was given, by step name (the last
// attempt's).
type seenInputs struct {
	mu sync.Mutex
	in map[string]run.StepInput
}

func (s *seenInputs) step(name string, await *run.Await) run.Step {
	return run.Step{Name: name, Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		s.mu.Lock()
		if s.in == nil {
			s.in = map[string]run.StepInput{}
		}
		s.in[name] = in
		s.mu.Unlock()
		return run.StepOutput{Summary: name, Data: json.RawMessage(`"` + name + `"`), Await: await}, nil
	}}
}

func (s *seenInputs) get(name string) run.StepInput {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.in[name]
}

func sha(b string) string {
	sum := sha256.Sum256([]byte(b))
	return hex.EncodeToString(sum[:])
}

// An approval's decision and its payload reach every step after the gate,
// not the one before it; the payload is kept as given (a number past
// float64's precision included, whitespace compacted), beside the run
// under its sha256, which the status and the audit event name.
func TestApprovalPayloadReachesNextSteps(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	var seen seenInputs
	agent := run.Agent{Slug: "pay-gated", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{seen.step("plan", &run.Await{Approval: "merge"}), seen.step("apply", nil), seen.step("report", nil)}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	id := submit(t, r, agent.Slug)
	if st := g.wait(r, id, 0, 0); st.Status != "awaiting_approval" || st.Approval.AfterStep != 1 {
		t.Fatalf("parked: %+v %+v", st, st.Approval)
	}
	payload := `{ "edits": ["title"], "id": 12345678901234567890 }`
	const want = `{"edits":["title"],"id":12345678901234567890}`
	st, err := r.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner", Reason: "ship it", Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Approval.PayloadSHA256 != sha(want) || st.Approval.PayloadBytes != len(want) {
		t.Errorf("status names payload %s (%d bytes), want %s (%d)", st.Approval.PayloadSHA256, st.Approval.PayloadBytes, sha(want), len(want))
	}
	if st := g.wait(r, id, time.Second, time.Minute); st.Status != "completed" {
		t.Fatalf("after approval: %+v", st)
	}
	if in := seen.get("plan"); in.Approval != nil {
		t.Errorf("the step before the gate was given %+v", in.Approval)
	}
	for _, name := range []string{"apply", "report"} {
		in := seen.get(name)
		if in.Approval == nil || in.Approval.DecidedBy != "owner" || in.Approval.Reason != "ship it" || string(in.Approval.Payload) != want {
			t.Errorf("%s was given %+v", name, in.Approval)
		} else if in.Approval.Payload != nil && in.Event != nil {
			t.Errorf("%s was given an event %+v", name, in.Event)
		}
	}
	key, _ := layout.RunWaitKey(agent.Slug, id, sha(want))
	var rec struct {
		Schema  int             `json:"schema"`
		Payload json.RawMessage `json:"payload"`
	}
	readJSON(t, g.store, key, &rec)
	if rec.Schema != 1 || string(rec.Payload) != want {
		t.Errorf("wait record %s: %+v", key, rec)
	}
	tc := auditContexts(t, g, id, "awaiting_approval>running")["awaiting_approval>running"]
	if tc.Approval == nil || tc.Approval.Reason != "ship it" || tc.Approval.PayloadSHA256 != sha(want) || tc.Approval.PayloadBytes != len(want) {
		t.Errorf("audit context of the approval: %+v", tc.Approval)
	}
}

// An external event's payload reaches the steps after the wait, with its
// type, id and source; an approval before the wait reaches them too.
func TestEventPayloadReachesNextStep(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	var seen seenInputs
	agent := run.Agent{Slug: "pay-event", Machine: lifecycle.MachineApproval, Steps: []run.Step{
		seen.step("plan", &run.Await{Approval: "push"}),
		seen.step("push", &run.Await{ExternalEvent: "ci.finished", Timeout: time.Hour}),
		seen.step("merge", nil)}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	id := submit(t, r, agent.Slug)
	g.wait(r, id, 0, 0)
	if _, err := r.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	if st := g.wait(r, id, time.Second, time.Minute); st.Status != "waiting_external" || st.External.AfterStep != 2 {
		t.Fatalf("after approval: %+v", st)
	}
	ev := run.ExternalEvent{Type: "ci.finished", ID: "evt-1", Source: "github", Payload: json.RawMessage(`{"conclusion":"success"}`)}
	if _, err := r.Deliver(ctx, id, lifecycle.ActorGateway, ev); err != nil {
		t.Fatal(err)
	}
	if st := g.wait(r, id, time.Second, time.Minute); st.Status != "completed" {
		t.Fatalf("after the event: %+v", st)
	}
	if in := seen.get("push"); in.Event != nil || in.Approval == nil || in.Approval.Payload != nil {
		t.Errorf("push was given event %+v, approval %+v", in.Event, in.Approval)
	}
	in := seen.get("merge")
	if in.Event == nil || in.Event.Type != "ci.finished" || in.Event.ID != "evt-1" || in.Event.Source != "github" ||
		string(in.Event.Payload) != `{"conclusion":"success"}` {
		t.Errorf("merge was given event %+v", in.Event)
	}
	if in.Approval == nil || in.Approval.DecidedBy != "owner" {
		t.Errorf("merge was given approval %+v", in.Approval)
	}
}

// A payload is checked like every input before anything is written: not
// JSON, too large, not clean UTF-8; JSON null is no payload.
func TestPayloadChecked(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	agent := run.Agent{Slug: "pay-check", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("plan", &run.Await{Approval: "merge"}), okStep("apply")}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	id := submit(t, r, agent.Slug)
	g.wait(r, id, 0, 0)
	big := `"` + strings.Repeat("x", codes.MaxDocumentBytes) + `"`
	tests := []struct {
		name, payload, code string
	}{
		{"not JSON", `{"a":`, codes.InvalidRequest},
		{"too large", big, codes.InputTooLarge},
		{"invalid UTF-8", "\"\xff\"", codes.InvalidInput},
		{"lone surrogate", `"\ud800"`, codes.InvalidInput},
		{"NUL", "\"a\x00\"", codes.InvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for verb, call := range map[string]func() error{
				"approve": func() error {
					_, err := r.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{Payload: json.RawMessage(tt.payload)})
					return err
				},
				"reject": func() error {
					_, err := r.Reject(ctx, id, lifecycle.ActorGateway, run.Decision{Payload: json.RawMessage(tt.payload)})
					return err
				},
				"deliver": func() error {
					_, err := r.Deliver(ctx, id, lifecycle.ActorGateway, run.ExternalEvent{Type: "e", Payload: json.RawMessage(tt.payload)})
					return err
				},
			} {
				if err := call(); lifecycle.ErrorCode(err) != tt.code {
					t.Errorf("%s: %v (code %s), want %s", verb, err, lifecycle.ErrorCode(err), tt.code)
				}
			}
		})
	}
	if st := status(t, r, id); st.Status != "awaiting_approval" || st.Approval.Decision != "" {
		t.Fatalf("a refused payload moved the run: %+v", st)
	}
	prefix, _ := layout.RunPrefix(agent.Slug, id)
	for key, err := range g.store.List(ctx, prefix+"waits/") {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("a refused payload was written: %s", key)
	}
	st, err := r.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{Payload: json.RawMessage(" null ")})
	if err != nil || st.Approval.PayloadSHA256 != "" || st.Approval.PayloadBytes != 0 {
		t.Fatalf("null payload: %+v %v", st.Approval, err)
	}
}

// A runner that takes the run over after the decision (the first one lost
// in the step after the gate) hands that step the decision and its
// payload again: they are read from the store, not from memory.
func TestTakeoverAfterDecisionHandsPayload(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	hold := make(chan struct{})
	defer close(hold)
	inA := make(chan struct{}, 1)
	var mu sync.Mutex
	var got []run.StepInput
	mk := func(owner string) run.Agent {
		apply := run.Step{Name: "apply", Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			mu.Lock()
			got = append(got, in)
			mu.Unlock()
			if owner == "a" {
				inA <- struct{}{}
				if !testSelect(ctx, hold) {
					return run.StepOutput{}, ctx.Err()
				}
			}
			return run.StepOutput{}, nil
		}}
		plan := awaitStep("plan", &run.Await{Approval: "merge"})
		plan.Resumable = true // skipped with its checkpoint: the gate is not asked again
		return run.Agent{Slug: "pay-takeover", Machine: lifecycle.MachineApproval, Steps: []run.Step{plan, apply}}
	}
	a, stopA := g.runner("a", nil, mk("a"))
	ctx := context.Background()
	id := submit(t, a, "pay-takeover")
	g.wait(a, id, 0, 0)
	if _, err := a.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner", Reason: "r", Payload: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	<-inA
	stopA() // lost in the step after the gate; its lease stays behind
	b, _ := g.runner("b", nil, mk("b"))
	st := g.wait(b, id, 30*time.Second, 10*time.Minute)
	if st.Status != "completed" || st.ResumeCount != 1 {
		t.Fatalf("after takeover: %s %v resume %d", st.Status, deref(st.Error), st.ResumeCount)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("apply ran %d times, want 2 (lost, then taken over)", len(got))
	}
	for i, in := range got {
		if in.Approval == nil || in.Approval.DecidedBy != "owner" || in.Approval.Reason != "r" || string(in.Approval.Payload) != `{"n":1}` {
			t.Errorf("attempt %d of apply was given %+v", i+1, in.Approval)
		}
	}
}

// A run parked by a release that kept no after_step is handed its
// decision once approved by this one (the gate is taken as after the
// steps counted); a payload record of another schema fails the run
// RUN_RESUME_FAILED rather than run the step with what it misread.
func TestWaitDataOldRecordsAndMissingPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		edit  func(d map[string]any)
		check func(t *testing.T, st lifecycle.RunStatus, seen run.StepInput)
	}{
		{"no after_step", func(d map[string]any) { delete(d["approval"].(map[string]any), "after_step") },
			func(t *testing.T, st lifecycle.RunStatus, seen run.StepInput) {
				if st.Status != "completed" || seen.Approval == nil || string(seen.Approval.Payload) != `[1]` {
					t.Errorf("%+v, step given %+v", st, seen.Approval)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t, nil)
			var seen seenInputs
			agent := run.Agent{Slug: "pay-old", Machine: lifecycle.MachineApproval,
				Steps: []run.Step{seen.step("plan", &run.Await{Approval: "merge"}), seen.step("apply", nil)}}
			a, stopA := g.runner("a", nil, agent)
			id := submit(t, a, agent.Slug)
			g.wait(a, id, 0, 0)
			stopA()
			key, _ := layout.RunStatusKey(agent.Slug, id)
			rewrite(t, g.store, key, tt.edit)
			b, _ := g.runner("b", nil, agent)
			if _, err := b.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{Payload: json.RawMessage(`[1]`)}); err != nil {
				t.Fatal(err)
			}
			tt.check(t, g.wait(b, id, time.Second, time.Minute), seen.get("apply"))
		})
	}
	t.Run("payload of another schema", func(t *testing.T) {
		g := newRig(t, nil)
		var seen seenInputs
		agent := run.Agent{Slug: "pay-schema", Machine: lifecycle.MachineApproval,
			Steps: []run.Step{seen.step("plan", &run.Await{Approval: "merge"}), seen.step("apply", nil)}}
		r, _ := g.runner("a", nil, agent)
		id := submit(t, r, agent.Slug)
		g.wait(r, id, 0, 0)
		// A later release's record under the payload's name: the approval
		// keeps it (create-only), the runner refuses to misread it.
		wkey, _ := layout.RunWaitKey(agent.Slug, id, sha(`[2]`))
		if _, err := g.store.Put(ctx, wkey, []byte(`{"schema":2,"payload":[2]}`), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{Payload: json.RawMessage(`[2]`)}); err != nil {
			t.Fatal(err)
		}
		st := g.wait(r, id, time.Second, time.Minute)
		if st.Status != "failed" || !strings.HasPrefix(deref(st.Error), "RUN_RESUME_FAILED: payload") || seen.get("apply").Step != 0 {
			t.Errorf("a payload of another schema: %s %v (apply given %+v)", st.Status, deref(st.Error), seen.get("apply"))
		}
	})
}

// rewrite changes a stored JSON record by hand, as another release wrote it.
func rewrite(t *testing.T, s *storage.Store, key string, edit func(map[string]any)) {
	t.Helper()
	ctx := context.Background()
	b, ver, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	edit(d)
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, key, out, storage.IfMatch(ver)); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatal(err)
	}
}
