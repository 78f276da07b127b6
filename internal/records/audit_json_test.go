package records_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/jsoncheck"
	"github.com/runconveyor/conveyor/lifecycle"
)

func fullAuditEvent() *lifecycle.AuditEvent {
	at := time.Date(2026, 2, 24, 10, 0, 0, 123456789, time.UTC)
	ev := func(event string, prior []lifecycle.AuditEvent) lifecycle.AuditEvent {
		return lifecycle.AuditEvent{
			ID: "x", TS: at, Event: event, Actor: "orchestration-layer", JobID: "job<1>", RunID: "run&1",
			EntryID: "e1", ArtifactID: "a1", ProposalID: "p1", TenantID: "acme", From: "QUEUED", To: "CONTEXT_ASSEMBLY", Node: "host\u2028\xff",
			Context: json.RawMessage(`{"run_id": "r1"}`), Prior: prior,
		}
	}
	last := ev("job.status.update", []lifecycle.AuditEvent{ev("job.create", []lifecycle.AuditEvent{ev("inner", nil)})})
	return &last
}

// TestAuditEventJSON: the hand-written encoder of an audit event writes
// what json.Marshal writes, on an event with every field set (a field added
// to AuditEvent fails here until AppendJSON writes it), on one with none
// set, and on the values whose encoding has special cases.
func TestAuditEventJSON(t *testing.T) {
	t.Parallel()
	for _, f := range jsoncheck.ZeroFields(fullAuditEvent()) {
		if !strings.HasSuffix(f, ".Prior[].Prior[].Prior") {
			t.Fatalf("fullAuditEvent leaves %s unset, so its encoding goes untested", f)
		}
	}
	cases := map[string]func(ev *lifecycle.AuditEvent){
		"full":            func(*lifecycle.AuditEvent) {},
		"empty":           func(ev *lifecycle.AuditEvent) { *ev = lifecycle.AuditEvent{} },
		"creation":        func(ev *lifecycle.AuditEvent) { ev.From, ev.JobID, ev.Prior, ev.Context = "", "", nil, nil },
		"invalid context": func(ev *lifecycle.AuditEvent) { ev.Context = json.RawMessage(`{`) },
		"zoned":           func(ev *lifecycle.AuditEvent) { ev.TS = ev.TS.In(time.FixedZone("X", -3600)) },
		"year 10000":      func(ev *lifecycle.AuditEvent) { ev.Prior[0].TS = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
	}
	for name, mod := range cases {
		ev := fullAuditEvent()
		mod(ev)
		jsoncheck.Same(t, name, records.AuditJSON(ev))
	}
}
