package storage_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/storage"
)

// A compare-and-swap write: the second writer holding the old version loses.
func Example() {
	ctx := context.Background()
	var s storage.Store = memstore.New()

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

type job struct {
	storage.Meta
	Status  string `json:"status"`
	Attempt int    `json:"attempt"`
}

// Update re-reads and re-runs the mutation when another writer got there
// first; the version counter inside the document counts the writes.
func ExampleUpdate() {
	ctx := context.Background()
	s := memstore.New()
	key, _ := storage.JobKey("550e8400-e29b-41d4-a716-446655440000")

	_, _ = storage.Create(ctx, s, key, &job{Status: "QUEUED"})
	j, _, err := storage.Update(ctx, s, key, func(j *job) error {
		if j.Status != "QUEUED" {
			return fmt.Errorf("cannot start a %s job", j.Status)
		}
		j.Status, j.Attempt = "CONTEXT_ASSEMBLY", j.Attempt+1
		return nil
	})
	fmt.Println(j.Status, j.Attempt, j.Version, err)

	b, _, _ := s.Get(ctx, key)
	fmt.Println(string(b))
	// Output:
	// CONTEXT_ASSEMBLY 1 2 <nil>
	// {"version":2,"status":"CONTEXT_ASSEMBLY","attempt":1}
}

// Ids are checked before they become part of a key.
func ExampleRunStatusKey() {
	key, err := storage.RunStatusKey("archivist-violin", "run_2026-02-14_080000_abc123")
	fmt.Println(key, err)
	_, err = storage.RunStatusKey("archivist-violin", "../x")
	fmt.Println(err, errors.Is(err, storage.ErrInvalidID))
	// Output:
	// agents/archivist-violin/runs/run_2026-02-14_080000_abc123/status.json <nil>
	// storage: invalid run id "../x": starts with "." true
}
