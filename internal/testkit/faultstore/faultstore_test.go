package faultstore_test

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOutagesLookLikeAStoppedServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := faultstore.New(memstore.New())
	if _, err := s.Put(ctx, "k", []byte("v"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	s.Down()
	calls := map[string]error{}
	_, _, calls["get"] = s.Get(ctx, "k")
	_, calls["put"] = s.Put(ctx, "k", []byte("w"), storage.Condition{})
	calls["delete"] = s.Delete(ctx, "k", storage.Condition{})
	for _, err := range storage.New(s).List(ctx, "") {
		calls["list"] = err
	}
	for op, err := range calls {
		if !storage.Transient(err) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s while down: %v, want a transient refused connection", op, err)
		}
	}
	s.Up()
	s.FailNext(1)
	if _, _, err := s.Get(ctx, "k"); !storage.Transient(err) {
		t.Fatalf("first Get after FailNext(1): %v", err)
	}
	if b, _, err := s.Get(ctx, "k"); err != nil || string(b) != "v" {
		t.Fatalf("Get when up: %q, %v (the outage wrote nothing)", b, err)
	}
	if s.Failed() != 5 {
		t.Fatalf("Failed() = %d, want 5", s.Failed())
	}
}
