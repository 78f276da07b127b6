package run_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/testkit/inputtest"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// badValue is one bad value of a field: over its limit, not UTF-8, or with
// a NUL byte.
type badValue struct {
	name  string
	value string
	code  string
}

// badValues returns the three bad values of a text field of limit bytes.
func badValues(limit int) []badValue {
	return []badValue{
		{"oversized", strings.Repeat("x", limit+1), codes.InputTooLarge},
		{"invalid UTF-8", "ok\xff\xfe", codes.InvalidInput},
		{"NUL", "ok\x00ok", codes.InvalidInput},
	}
}

// TestRunnerRefusesBadInput sends every free-text input of the Runner each
// fault and checks the typed error, its code, and that not one byte of the
// store changed (issue 10 F: a 10 MB cancel reason or decided_by used to
// land in status.json, and invalid UTF-8 and NUL were accepted everywhere).
func TestRunnerRefusesBadInput(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	gated := run.Agent{Slug: "gated", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("plan", &run.Await{Approval: "merge"}), okStep("apply")}}
	waits := run.Agent{Slug: "waits", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("wait-ci", &run.Await{ExternalEvent: "ci.finished", Timeout: time.Hour}), okStep("after")}}
	plain := run.Agent{Slug: "plain", Steps: []run.Step{okStep("s")}}
	r, stop := g.runner("a", nil, gated, waits, plain)
	// A parked run per operation, so that on code without the checks each
	// operation's first bad value shows what it wrote.
	cancelRun, approveRun, rejectRun := submit(t, r, gated.Slug), submit(t, r, gated.Slug), submit(t, r, gated.Slug)
	waitingRun := submit(t, r, waits.Slug)
	for _, id := range []string{cancelRun, approveRun, rejectRun} {
		if st := g.wait(r, id, 0, 0); st.Status != "awaiting_approval" {
			t.Fatalf("gated run %s", st.Status)
		}
	}
	if st := g.wait(r, waitingRun, 0, 0); st.Status != "waiting_external" {
		t.Fatalf("waiting run %s", st.Status)
	}
	// No runner loop from here on: whatever changes in the store is the
	// doing of the call under test.
	stop()
	ctx := context.Background()
	ok := lifecycle.SubmitRequest{AgentSlug: plain.Slug}
	dec := run.Decision{DecidedBy: "owner", Reason: "fine"}
	ev := run.ExternalEvent{Type: "ci.finished", ID: "evt-1", Source: "github"}

	type input struct {
		method, field string
		limit         int
		// call makes the call with v in the field.
		call func(v string) error
	}
	inputs := []input{
		{"Submit", "agent_slug", codes.MaxNameBytes, func(v string) error {
			req := ok
			req.AgentSlug = v
			_, err := r.Submit(ctx, req)
			return err
		}},
		{"Submit", "trigger", codes.MaxNameBytes, func(v string) error {
			req := ok
			req.Trigger = v
			_, err := r.Submit(ctx, req)
			return err
		}},
		{"Submit", "input", codes.MaxDocumentBytes, func(v string) error {
			req := ok
			// A JSON string around v, so only v's fault is wrong with it.
			req.Input = json.RawMessage(`"` + v + `"`)
			_, err := r.Submit(ctx, req)
			return err
		}},
		{"Submit", "idempotency_key", run.MaxIdempotencyKeyBytes, func(v string) error {
			req := ok
			req.IdempotencyKey = "api:client:" + v
			_, err := r.Submit(ctx, req)
			return err
		}},
		{"Cancel", "reason", codes.MaxTextBytes, func(v string) error {
			_, err := r.Cancel(ctx, cancelRun, lifecycle.ActorGateway, run.CancelRequest{Reason: v})
			return err
		}},
		{"Approve", "decided_by", codes.MaxNameBytes, func(v string) error {
			d := dec
			d.DecidedBy = v
			_, err := r.Approve(ctx, approveRun, lifecycle.ActorGateway, d)
			return err
		}},
		{"Approve", "reason", codes.MaxTextBytes, func(v string) error {
			d := dec
			d.Reason = v
			_, err := r.Approve(ctx, approveRun, lifecycle.ActorGateway, d)
			return err
		}},
		{"Reject", "decided_by", codes.MaxNameBytes, func(v string) error {
			d := dec
			d.DecidedBy = v
			_, err := r.Reject(ctx, rejectRun, lifecycle.ActorGateway, d)
			return err
		}},
		{"Reject", "reason", codes.MaxTextBytes, func(v string) error {
			d := dec
			d.Reason = v
			_, err := r.Reject(ctx, rejectRun, lifecycle.ActorGateway, d)
			return err
		}},
		{"Deliver", "event_type", codes.MaxNameBytes, func(v string) error {
			e := ev
			e.Type = v
			_, err := r.Deliver(ctx, waitingRun, lifecycle.ActorGateway, e)
			return err
		}},
		{"Deliver", "event_id", codes.MaxRefBytes, func(v string) error {
			e := ev
			e.ID = v
			_, err := r.Deliver(ctx, waitingRun, lifecycle.ActorGateway, e)
			return err
		}},
		{"Deliver", "source", codes.MaxRefBytes, func(v string) error {
			e := ev
			e.Source = v
			_, err := r.Deliver(ctx, waitingRun, lifecycle.ActorGateway, e)
			return err
		}},
	}
	for _, in := range inputs {
		for _, f := range badValues(in.limit) {
			t.Run(in.method+"/"+in.field+"/"+f.name, func(t *testing.T) {
				before := teststores.Snapshot(t, g.store)
				err := in.call(f.value)
				inputtest.Check(t, err, in.field, in.limit, f.code)
				teststores.Unchanged(t, g.store, before)
			})
		}
	}
	// An input escape that decodes to half a UTF-16 pair: any decoder would
	// read U+FFFD, not what was sent (issue 18).
	t.Run("Submit/input/lone surrogate", func(t *testing.T) {
		before := teststores.Snapshot(t, g.store)
		req := ok
		req.Input = json.RawMessage(`{"q":"\udc00"}`)
		_, err := r.Submit(ctx, req)
		inputtest.Check(t, err, "input", codes.MaxDocumentBytes, codes.InvalidInput)
		teststores.Unchanged(t, g.store, before)
	})
	// The 10 MB values of the issue, for the record.
	huge := strings.Repeat("x", 10<<20)
	before := teststores.Snapshot(t, g.store)
	if _, err := r.Cancel(ctx, cancelRun, lifecycle.ActorGateway, run.CancelRequest{Reason: huge}); lifecycle.ErrorCode(err) != codes.InputTooLarge {
		t.Errorf("10 MB cancel reason: %v", err)
	}
	if _, err := r.Approve(ctx, approveRun, lifecycle.ActorGateway, run.Decision{DecidedBy: huge}); lifecycle.ErrorCode(err) != codes.InputTooLarge {
		t.Errorf("10 MB decided_by: %v", err)
	}
	if _, err := r.Deliver(ctx, waitingRun, lifecycle.ActorGateway, run.ExternalEvent{Type: "ci.finished", ID: huge}); lifecycle.ErrorCode(err) != codes.InputTooLarge {
		t.Errorf("10 MB event id: %v", err)
	}
	teststores.Unchanged(t, g.store, before)

	// Clean values at the limits still pass: a multi-line reason and
	// multi-byte names.
	st, err := r.Approve(ctx, approveRun, lifecycle.ActorGateway,
		run.Decision{DecidedBy: strings.Repeat("ż", codes.MaxNameBytes/2), Reason: "line one\nline two\t" + strings.Repeat("x", codes.MaxTextBytes-18)})
	if err != nil || st.Approval == nil || len(st.Approval.DecidedBy) != codes.MaxNameBytes || len(st.Approval.Reason) != codes.MaxTextBytes {
		t.Fatalf("approve at the limits: %+v %v", st.Approval, err)
	}
}
