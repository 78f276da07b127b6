package records

import (
	"context"
	"fmt"

	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Doc is the constraint of the typed-document functions: a pointer to a
// struct that embeds lifecycle.Meta (or has a StorageMeta method that returns one).
type Doc[T any] interface {
	*T
	StorageMeta() *lifecycle.Meta
}

// Create writes doc at key, create-only, with its version counter set to 1.
// An existing key gives an error matching storage.ErrPreconditionFailed and leaves
// both the stored document and doc's counter untouched.
func Create[T any, P Doc[T]](ctx context.Context, s *storage.Store, key string, doc P) (storage.Version, error) {
	m := doc.StorageMeta()
	old := m.Version
	w, err := CreateWrite[T](key, doc)
	if err != nil {
		return "", err
	}
	v, err := s.Put(ctx, key, w.Value, w.Cond)
	if err != nil {
		m.Version = old
		return "", err
	}
	return v, nil
}

// CreateWrite is Create as one write of a storage Commit: doc encoded
// with its version counter set to 1 (left so; the caller whose commit
// fails writes doc again from scratch), create-only at key.
func CreateWrite[T any, P Doc[T]](key string, doc P) (storage.Write, error) {
	m := doc.StorageMeta()
	old := m.Version
	m.Version = 1
	m.Unknown = "" // a record created holds only what this release writes
	b, err := jsonenc.Marshal(doc)
	if err != nil {
		m.Version = old
		return storage.Write{}, fmt.Errorf("storage: encode %s: %w", key, err)
	}
	return storage.Write{Key: key, Value: b, Cond: storage.IfNotExists()}, nil
}

// Read returns the document at key and the store version it was read at,
// with the members its type does not know kept (Keep) for a rewrite.
// Undecodable bytes give a *lifecycle.QuarantinedError.
// A missing key gives an error matching storage.ErrNotFound.
func Read[T any, P Doc[T]](ctx context.Context, s *storage.Store, key string) (T, storage.Version, error) {
	var doc T
	b, v, err := s.Get(ctx, key)
	if err != nil {
		return doc, "", err
	}
	if err := Decode[T, P](key, b, v, &doc); err != nil {
		return doc, "", err
	}
	return doc, v, nil
}
