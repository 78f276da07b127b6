package storage_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/storage"
)

// A compare-and-swap write: the second writer holding the old version loses.
func Example() {
	ctx := context.Background()
	var s *storage.Store = memstore.New()

	v1, _ := s.Put(ctx, "jobs/j1.json", []byte(`{"status":"QUEUED"}`), storage.IfNotExists())
	_, err := s.Put(ctx, "jobs/j1.json", []byte(`{"status":"QUEUED"}`), storage.IfNotExists())
	fmt.Println("second create:", errors.Is(err, storage.ErrPreconditionFailed))

	_, _ = s.Put(ctx, "jobs/j1.json", []byte(`{"status":"CONTEXT_ASSEMBLY"}`), storage.IfMatch(v1))
	_, err = s.Put(ctx, "jobs/j1.json", []byte(`{"status":"FAILED"}`), storage.IfMatch(v1))
	fmt.Println("stale writer:", errors.Is(err, storage.ErrPreconditionFailed))

	b, _, _ := s.Get(ctx, "jobs/j1.json")
	fmt.Println(string(b))
	// Output:
	// second create: true
	// stale writer: true
	// {"status":"CONTEXT_ASSEMBLY"}
}

// Ids are checked before they become part of a key.
func ExampleRunStatusKey() {
	key, err := layout.RunStatusKey("archivist-violin", "run_2026-02-14_080000_abc123")
	fmt.Println(key, err)
	_, err = layout.RunStatusKey("archivist-violin", "../x")
	fmt.Println(err, errors.Is(err, storage.ErrInvalidID))
	// Output:
	// agents/archivist-violin/runs/run_2026-02-14_080000_abc123/status.json <nil>
	// storage: invalid run id "../x": starts with "." true
}
