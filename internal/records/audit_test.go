package records_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

func TestAuditLog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memstore.New()
	clock := time.Date(2026, 2, 24, 23, 59, 58, 0, time.UTC)
	log := &records.AuditLog{Store: s, Node: "alpine", Now: func() time.Time { clock = clock.Add(time.Second); return clock }}

	var written []lifecycle.AuditEvent
	for _, to := range []string{"QUEUED", "CONTEXT_ASSEMBLY", "NOTEBOOKLM_CALL"} { // 23:59:59, 00:00:00, 00:00:01
		ev, err := log.Record(ctx, lifecycle.AuditEvent{Event: "job.status.update", Actor: "orchestration-layer", JobID: "j1", From: "PENDING", To: to})
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, ev)
	}
	// An explicit ts and node are kept (converted to UTC).
	ev, err := log.Record(ctx, lifecycle.AuditEvent{TS: time.Date(2026, 2, 25, 3, 0, 0, 0, time.FixedZone("", 3600)), Event: "run.status.update", Actor: "orchestration-layer", RunID: "r1", To: "queued", Node: "beta"})
	if err != nil || ev.Node != "beta" || ev.TS.Location() != time.UTC {
		t.Fatalf("Record = %+v, %v", ev, err)
	}

	var day1, day2 []lifecycle.AuditEvent
	for ev, err := range records.ReadAuditDay(ctx, s, time.Date(2026, 2, 24, 12, 0, 0, 0, time.UTC)) {
		if err != nil {
			t.Fatal(err)
		}
		day1 = append(day1, ev)
	}
	for ev, err := range records.ReadAuditDay(ctx, s, time.Date(2026, 2, 25, 0, 0, 0, 0, time.UTC)) {
		if err != nil {
			t.Fatal(err)
		}
		day2 = append(day2, ev)
	}
	if len(day1) != 1 || !reflect.DeepEqual(day1[0], written[0]) {
		t.Fatalf("day 1 = %+v, want %+v", day1, written[:1])
	}
	if len(day2) != 3 || !reflect.DeepEqual(day2[0], written[1]) || !reflect.DeepEqual(day2[1], written[2]) || day2[2].RunID != "r1" {
		t.Fatalf("day 2 = %+v, want the later events in time order", day2)
	}

	// The stored JSON reads as docs/spec.md#audit-event shows it.
	raw, _, err := s.Get(ctx, "audit/20260224/"+written[0].ID+".json")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"ts":"2026-02-24T23:59:59Z","event":"job.status.update","actor":"orchestration-layer","job_id":"j1","from":"PENDING","to":"QUEUED","node":"alpine"}`
	if string(raw) != want {
		t.Fatalf("stored\n%s\nwant\n%s", raw, want)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m["run_id"] != nil {
		t.Fatalf("empty optional ids must be omitted: %s", raw)
	}

	if _, err := log.Record(ctx, lifecycle.AuditEvent{Actor: "x"}); err == nil {
		t.Fatal("event without a name accepted")
	}
	if _, err := (&records.AuditLog{}).Record(ctx, lifecycle.AuditEvent{Event: "e", Actor: "a"}); err == nil {
		t.Fatal("AuditLog without a store accepted")
	}
}

func TestAuditEventIDSortsByTime(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	prev := ""
	for _, d := range []time.Duration{0, time.Nanosecond, time.Microsecond, time.Second, time.Hour} {
		id := records.NewAuditEventID(base.Add(d))
		if err := storekey.ValidateID("event id", id); err != nil {
			t.Fatal(err)
		}
		if id <= prev {
			t.Fatalf("id %q does not sort after %q", id, prev)
		}
		prev = id
	}
	if a, b := records.NewAuditEventID(base), records.NewAuditEventID(base); a == b || !strings.HasPrefix(a, "20260224T100000.000000000Z-") {
		t.Fatalf("ids %q, %q", a, b)
	}
}

// TestAuditCreateOnly: an audit event is never overwritten.
func TestAuditCreateOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memstore.New()
	ev, err := (&records.AuditLog{Store: s}).Record(ctx, lifecycle.AuditEvent{Event: "e", Actor: "a"})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := layout.AuditKey(ev.TS, ev.ID)
	if _, err := s.Put(ctx, key, []byte("{}"), storage.IfNotExists()); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("re-creating an audit event = %v", err)
	}
}

// The transition context is one optional field beside the others: absent
// when empty, a JSON object when given, and read back as written.
func TestAuditEventContext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memstore.New()
	log := &records.AuditLog{Store: s, Node: "n1"}
	at := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	tc := json.RawMessage(`{"run_id":"r1","user_id":"u-42","initiator":"user"}`)
	for _, ev := range []lifecycle.AuditEvent{
		{TS: at, Event: "run.status.update", Actor: "gateway", RunID: "r1", To: "requested"},
		{TS: at.Add(time.Second), Event: "run.status.update", Actor: "gateway", RunID: "r1", From: "requested", To: "queued", Context: tc},
	} {
		if _, err := log.Record(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	var got []lifecycle.AuditEvent
	for ev, err := range records.ReadAuditDay(ctx, s, at) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	if len(got) != 2 || got[0].Context != nil || string(got[1].Context) != string(tc) {
		t.Fatalf("events %+v", got)
	}
	key, _ := layout.AuditKey(got[0].TS, got[0].ID)
	b, _, err := s.Get(ctx, key)
	if err != nil || strings.Contains(string(b), "context") {
		t.Errorf("event without a context: %s %v", b, err)
	}
}
