package audit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/audit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every writer of a record writes the same audit object: the second Put
// and an Ensure of an object already there succeed and change nothing;
// Ensure writes one that is missing.
func TestPutAndEnsureWriteOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	body := []byte(`{"event":"run.created"}`)
	if err := audit.Put(ctx, s, "audit/e1.json", body); err != nil {
		t.Fatal(err)
	}
	_, v1, _ := s.Get(ctx, "audit/e1.json")
	if err := audit.Put(ctx, s, "audit/e1.json", body); err != nil {
		t.Fatalf("second Put of the same object: %v", err)
	}
	if err := audit.Ensure(ctx, s, "audit/e1.json", body); err != nil {
		t.Fatalf("Ensure of an object there: %v", err)
	}
	if b, v, err := s.Get(ctx, "audit/e1.json"); err != nil || v != v1 || string(b) != string(body) {
		t.Fatalf("object after a second Put and an Ensure: %q at %s (was %s), %v", b, v, v1, err)
	}
	if err := audit.Ensure(ctx, s, "audit/e2.json", body); err != nil {
		t.Fatalf("Ensure of a missing object: %v", err)
	}
	if b, _, err := s.Get(ctx, "audit/e2.json"); err != nil || string(b) != string(body) {
		t.Fatalf("Ensure wrote %q, %v", b, err)
	}
}

type key struct{}

// The audit write after a state write outlives the request that made it,
// keeps its values, and has a budget of its own.
func TestContextOutlivesItsRequest(t *testing.T) {
	t.Parallel()
	req, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "trace"))
	cancel()
	actx, done := audit.Context(req, time.Hour)
	defer done()
	if actx.Err() != nil || actx.Value(key{}) != "trace" {
		t.Fatalf("audit context: err %v, value %v; want live, with the request's value", actx.Err(), actx.Value(key{}))
	}
	if d, ok := actx.Deadline(); !ok || time.Until(d) > time.Hour {
		t.Fatalf("audit context deadline %v, %v; want its own, within the budget", d, ok)
	}
	short, done2 := audit.Context(req, time.Nanosecond)
	defer done2()
	<-short.Done()
	if !errors.Is(short.Err(), context.DeadlineExceeded) {
		t.Fatalf("budget spent: %v", short.Err())
	}
}
