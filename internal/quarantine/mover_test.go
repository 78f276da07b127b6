package quarantine_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/quarantine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

// Two processes that read the same poison version quarantine it once: the
// late one must not delete the record the first wrote in its place (a
// conditional Delete is not atomic on MinIO, so only one may try).
func TestQuarantineOfOneVersionDeletesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	v, _ := s.Put(ctx, "queue/agents/a.json", []byte("junk"), storage.IfNotExists())
	ce := &lifecycle.QuarantinedError{Key: "queue/agents/a.json", Version: string(v), Data: []byte("junk"), Reason: "cannot decode"}
	q1, err := records.Quarantine(ctx, s, ce, t0)
	if err != nil {
		t.Fatal(err)
	}
	// The first process writes a good record in the poison's place.
	if _, err := s.Put(ctx, ce.Key, []byte(`{"agent":"a"}`), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	// The second read the same poison version and quarantines it late.
	q2, err := records.Quarantine(ctx, s, ce, t0.Add(time.Second))
	if err != nil || q2 != q1 {
		t.Fatalf("late quarantine of the same version: %q, %v; want %q, nil", q2, err, q1)
	}
	if b, _, err := s.Get(ctx, ce.Key); err != nil || string(b) != `{"agent":"a"}` {
		t.Fatalf("the record written in the poison's place: %q, %v", b, err)
	}
	n := 0
	for _, err := range records.ListQuarantine(ctx, s) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d quarantine copies of one version, want 1", n)
	}
}

func TestQuarantinerCountsAndLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	v, _ := s.Put(ctx, "jobs/x.json", []byte("{junk"), storage.IfNotExists())
	var buf strings.Builder
	q := &quarantine.Mover{Store: s, Clock: clock.NewFake(t0), Log: slog.New(slog.NewTextHandler(&buf, nil))}
	ce := &lifecycle.QuarantinedError{Key: "jobs/x.json", Version: string(v), Data: []byte("{junk"), Reason: "cannot decode"}
	if _, err := q.Move(ctx, ce); err != nil {
		t.Fatal(err)
	}
	if q.Count() != 1 || !strings.Contains(buf.String(), "record_quarantined") {
		t.Fatalf("count %d, log %q", q.Count(), buf.String())
	}
}
