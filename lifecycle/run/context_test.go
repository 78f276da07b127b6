package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// auditContexts reads the audit events of a run with their transition
// contexts, keyed "from>to" (the last one of each move wins), once want
// moves have been recorded (an event follows its write).
func auditContexts(t *testing.T, g *rig, runID string, want ...string) map[string]lifecycle.TransitionContext {
	t.Helper()
	out := map[string]lifecycle.TransitionContext{}
	until(t, "the audit events of "+strings.Join(want, " "), func() bool {
		clear(out)
		for ev, err := range records.ReadAuditDay(context.Background(), g.store, epoch0) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.RunID != runID {
				continue
			}
			var tc lifecycle.TransitionContext
			if err := json.Unmarshal(ev.Context, &tc); err != nil {
				t.Fatalf("audit event %s: context %s: %v", ev.ID, ev.Context, err)
			}
			if tc.RunID != runID || tc.Timestamp.IsZero() {
				t.Errorf("audit event %s>%s: context %+v lacks the run id or time", ev.From, ev.To, tc)
			}
			out[ev.From+">"+ev.To] = tc
		}
		for _, w := range want {
			if _, ok := out[w]; !ok {
				return false
			}
		}
		return true
	})
	return out
}

// logLines returns the JSON log lines named msg.
func logLines(t *testing.T, logs *testlog.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// Every status write carries its transition context (docs/spec.md#transition-context) into
// the audit event and the run_transition log line; the caller's part comes
// from the control call, the runner adds run id, time, initiator and the
// approval's details.
func TestTransitionContextInAuditAndLog(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	var logs *testlog.Buffer
	agent := run.Agent{Slug: "ctx-gated", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("plan", &run.Await{Approval: "merge"}), okStep("apply")}}
	r, _ := g.runner("a", func(c *run.Config) { logs = capture(c) }, agent)
	ctx := context.Background()

	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: agent.Slug,
		Caller: lifecycle.Caller{UserID: "u-1", Metadata: map[string]string{"ticket": "T-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := g.wait(r, res.RunID, 0, 0); st.Status != "awaiting_approval" {
		t.Fatalf("parked: %+v", st)
	}
	dec := run.Decision{DecidedBy: "owner", Reason: "looks good",
		Caller: lifecycle.Caller{UserID: "u-42", Metadata: map[string]string{"ticket": "T-9"}}}
	if _, err := r.Approve(ctx, res.RunID, lifecycle.ActorGateway, dec); err != nil {
		t.Fatal(err)
	}
	if st := g.wait(r, res.RunID, time.Second, time.Minute); st.Status != "completed" {
		t.Fatalf("after approval: %+v", st)
	}

	got := auditContexts(t, g, res.RunID, ">pending", "running>awaiting_approval", "awaiting_approval>running", "running>completed")
	tests := []struct {
		move      string
		initiator lifecycle.Initiator
		userID    string
		ticket    string
		approval  string // the approval's decision, "-" for none
	}{
		{">pending", lifecycle.InitiatorUser, "u-1", "T-1", "-"},
		{"pending>running", lifecycle.InitiatorSystem, "", "", "-"},
		{"running>awaiting_approval", lifecycle.InitiatorSystem, "", "", ""},
		{"awaiting_approval>running", lifecycle.InitiatorApproval, "u-42", "T-9", "approved"},
		{"running>completed", lifecycle.InitiatorSystem, "", "", "-"},
	}
	for _, tt := range tests {
		tc, ok := got[tt.move]
		if !ok {
			t.Errorf("no audit event for %s", tt.move)
			continue
		}
		if tc.Initiator != tt.initiator || tc.UserID != tt.userID || tc.Metadata["ticket"] != tt.ticket {
			t.Errorf("%s: context %+v, want initiator %s, user %q, ticket %q", tt.move, tc, tt.initiator, tt.userID, tt.ticket)
		}
		switch {
		case tt.approval == "-" && tc.Approval != nil:
			t.Errorf("%s: approval %+v, want none", tt.move, tc.Approval)
		case tt.approval != "-" && (tc.Approval == nil || tc.Approval.Action != "merge" || tc.Approval.Decision != tt.approval):
			t.Errorf("%s: approval %+v, want action merge, decision %q", tt.move, tc.Approval, tt.approval)
		}
	}
	if a := got["awaiting_approval>running"].Approval; a == nil || a.DecidedBy != "owner" || a.Reason != "looks good" || a.DecidedAt == nil {
		t.Errorf("approval details %+v", a)
	}

	// docs/spec.md#metrics: run_transition names the initiator; the context adds
	// the actor, user, metadata and approval.
	var approved map[string]any
	for _, rec := range logLines(t, logs, "run_transition") {
		if rec["from"] == "awaiting_approval" && rec["to"] == "running" {
			approved = rec
		}
	}
	if approved == nil {
		t.Fatalf("no run_transition awaiting_approval → running in:\n%s", logs.String())
	}
	meta, _ := approved["metadata"].(map[string]any)
	appr, _ := approved["approval"].(map[string]any)
	if approved["initiator"] != "approval" || approved["actor"] != "gateway" || approved["userId"] != "u-42" ||
		meta["ticket"] != "T-9" || appr["decision"] != "approved" || appr["action"] != "merge" {
		t.Errorf("run_transition %v", approved)
	}
	created := logLines(t, logs, "run_created")
	if len(created) != 1 || created[0]["userId"] != "u-1" || created[0]["initiator"] != "user" {
		t.Errorf("run_created %v", created)
	}
}

// A move the machine refuses reports the call's transition context in
// its typed error, and in its message (never the metadata).
func TestTransitionContextInRefusals(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	gated := run.Agent{Slug: "ctx-refused", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("plan", &run.Await{Approval: "merge"})}}
	r, _ := g.runner("a", nil, gated)
	ctx := context.Background()
	id := submit(t, r, gated.Slug)
	if st := g.wait(r, id, 0, 0); st.Status != "awaiting_approval" {
		t.Fatalf("parked: %+v", st)
	}
	caller := lifecycle.Caller{UserID: "u-7", Metadata: map[string]string{"secret": strings.Repeat("m", 100)}}

	// Mastra may not decide: forbidden, with the context.
	_, err := r.Approve(ctx, id, lifecycle.ActorMastra, run.Decision{DecidedBy: "bot", Caller: caller})
	var fae *lifecycle.ForbiddenActorError
	if !errors.As(err, &fae) || fae.Context == nil || fae.Context.UserID != "u-7" || fae.Context.RunID != id ||
		fae.Context.Initiator != lifecycle.InitiatorApproval || fae.Context.Approval == nil || fae.Context.Approval.DecidedBy != "bot" {
		t.Fatalf("forbidden approve: %#v", err)
	}
	if _, err := r.Reject(ctx, id, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	// The run is terminal now: approving it is refused, with the context.
	policy := caller
	policy.Initiator = lifecycle.InitiatorPolicy
	_, err = r.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner", Caller: policy})
	var ite *lifecycle.InvalidTransitionError
	if !errors.As(err, &ite) || !errors.Is(err, lifecycle.ErrTerminalState) || ite.Context == nil {
		t.Fatalf("approve after reject: %#v", err)
	}
	if tc := ite.Context; tc.RunID != id || tc.UserID != "u-7" || tc.Initiator != lifecycle.InitiatorPolicy ||
		tc.Timestamp.IsZero() || tc.Metadata["secret"] == "" || tc.Approval == nil || tc.Approval.Decision != "approved" {
		t.Errorf("context %+v", tc)
	}
	msg := err.Error()
	if !strings.Contains(msg, "run "+id) || !strings.Contains(msg, "user u-7") || !strings.Contains(msg, "initiator policy") ||
		strings.Contains(msg, "mmmm") {
		t.Errorf("message %q", msg)
	}
}

// The caller's part of the context is free text under the SDK's one input
// check: every control call refuses a bad one with an *InputError and
// writes nothing.
func TestCallerIsChecked(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	gated := run.Agent{Slug: "ctx-checked", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("plan", &run.Await{Approval: "merge"})}}
	r, _ := g.runner("a", nil, gated)
	ctx := context.Background()
	id := submit(t, r, gated.Slug)
	before := g.wait(r, id, 0, 0)

	many := map[string]string{}
	for i := range codes.MaxListLen + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	callers := []struct {
		name   string
		caller lifecycle.Caller
		field  string
		code   string
	}{
		{"user id too long", lifecycle.Caller{UserID: strings.Repeat("u", codes.MaxNameBytes+1)}, "user_id", codes.InputTooLarge},
		{"user id with NUL", lifecycle.Caller{UserID: "u\x00"}, "user_id", codes.InvalidInput},
		{"user id on two lines", lifecycle.Caller{UserID: "u\n1"}, "user_id", codes.InvalidInput},
		{"unknown initiator", lifecycle.Caller{Initiator: "cron"}, "initiator", codes.InvalidInput},
		{"metadata value too long", lifecycle.Caller{Metadata: map[string]string{"k": strings.Repeat("v", codes.MaxTextBytes+1)}}, "metadata[k]", codes.InputTooLarge},
		{"metadata key not UTF-8", lifecycle.Caller{Metadata: map[string]string{"\xff": "v"}}, "metadata key", codes.InvalidInput},
		{"too many metadata entries", lifecycle.Caller{Metadata: many}, "metadata", codes.InputTooLarge},
	}
	for _, c := range callers {
		t.Run(c.name, func(t *testing.T) {
			calls := map[string]func() error{
				"Submit": func() error {
					_, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: gated.Slug, Caller: c.caller})
					return err
				},
				"Cancel": func() error {
					_, err := r.Cancel(ctx, id, lifecycle.ActorGateway, run.CancelRequest{Caller: c.caller})
					return err
				},
				"Approve": func() error {
					_, err := r.Approve(ctx, id, lifecycle.ActorGateway, run.Decision{Caller: c.caller})
					return err
				},
				"Reject": func() error {
					_, err := r.Reject(ctx, id, lifecycle.ActorGateway, run.Decision{Caller: c.caller})
					return err
				},
				"Deliver": func() error {
					_, err := r.Deliver(ctx, id, lifecycle.ActorGateway, run.ExternalEvent{Type: "e", Caller: c.caller})
					return err
				},
			}
			for name, call := range calls {
				err := call()
				var ie *lifecycle.InputError
				if !errors.As(err, &ie) || ie.Field != c.field || lifecycle.ErrorCode(err) != c.code {
					t.Errorf("%s: %v (code %s), want an *InputError on %s with %s", name, err, lifecycle.ErrorCode(err), c.field, c.code)
				}
			}
		})
	}
	after := status(t, r, id)
	if after.Status != before.Status || after.Version != before.Version {
		t.Errorf("a refused call wrote: %+v, was %+v", after, before)
	}
	runs, err := r.Runs(ctx, gated.Slug)
	if err != nil || len(runs) != 1 {
		t.Errorf("a refused submit created a run: %d runs, %v", len(runs), err)
	}
}
