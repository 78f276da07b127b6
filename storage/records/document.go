package records

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/storage"
)

// Meta is embedded in every typed document. It carries the document's own
// version counter inside the JSON ("version": 1 on create, +1 per write of
// the engines' fenced read-check-write), so
// a reader of the raw object sees how many writes it has had, independent of
// the store's opaque Version. (An artifact's "version": 1 is this field,
// docs/spec.md#artifact.)
type Meta struct {
	Version int64 `json:"version"`
}

// StorageMeta gives the typed-document functions the embedded Meta.
func (m *Meta) StorageMeta() *Meta { return m }

// Doc is the constraint of the typed-document functions: a pointer to a
// struct that embeds Meta (or has a StorageMeta method that returns one).
type Doc[T any] interface {
	*T
	StorageMeta() *Meta
}

// Create writes doc at key, create-only, with its version counter set to 1.
// An existing key gives an error matching storage.ErrPreconditionFailed and leaves
// both the stored document and doc's counter untouched.
func Create[T any, P Doc[T]](ctx context.Context, s *storage.Store, key string, doc P) (storage.Version, error) {
	m := doc.StorageMeta()
	old := m.Version
	m.Version = 1
	b, err := jsonenc.Marshal(doc)
	if err != nil {
		m.Version = old
		return "", fmt.Errorf("storage: encode %s: %w", key, err)
	}
	v, err := s.Put(ctx, key, b, storage.IfNotExists())
	if err != nil {
		m.Version = old
		return "", err
	}
	return v, nil
}

// Read returns the document at key and the store version it was read at.
// A missing key gives an error matching storage.ErrNotFound.
func Read[T any, P Doc[T]](ctx context.Context, s *storage.Store, key string) (T, storage.Version, error) {
	var doc T
	b, v, err := s.Get(ctx, key)
	if err != nil {
		return doc, "", err
	}
	if err := json.Unmarshal(b, P(&doc)); err != nil {
		return doc, "", &CorruptError{Key: key, Version: v, Data: b, Reason: "cannot decode", Err: err}
	}
	return doc, v, nil
}
