package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

// namespaces is a Harness on a store that already runs: each check's
// namespace is Open(namespace), a name no other check or run uses (a key
// prefix of one bucket, a directory of one disk), and Remove empties it
// when the check ends, whatever its outcome.
type namespaces struct {
	// Open returns the driver at namespace: a string of letters, digits
	// and "-", ending in "/", unique to one check of one run.
	Open func(ctx context.Context, namespace string) (driver.Store, error)
	// Remove removes namespace and what s holds in it. Nil: emptyStore.
	Remove func(ctx context.Context, namespace string, s *storage.Store) error
	// Caps are the store's capabilities.
	Caps storetest.Capabilities
	// CleanupTimeout bounds each Remove. Zero: one minute.
	CleanupTimeout time.Duration
}

// Capabilities implements storetest.Harness.
func (n namespaces) Capabilities() storetest.Capabilities { return n.Caps }

// NewDriver implements storetest.Harness.
func (n namespaces) NewDriver(t *testing.T) driver.Store {
	t.Helper()
	ns := namespace(t.Name())
	d, err := n.Open(t.Context(), ns)
	if err != nil {
		t.Fatalf("opening namespace %s: %v", ns, err)
	}
	s := storage.New(d)
	t.Cleanup(func() {
		limit := n.CleanupTimeout
		if limit <= 0 {
			limit = time.Minute
		}
		// The test's own context is done by now.
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		remove := n.Remove
		if remove == nil {
			remove = func(ctx context.Context, _ string, s *storage.Store) error { return emptyStore(ctx, s) }
		}
		if err := remove(ctx, ns, s); err != nil {
			t.Errorf("removing namespace %s: %v", ns, err)
		}
	})
	return d
}

// namespace is a fresh namespace name for the check named name (a
// t.Name()): its last element, letters, digits and "-" only, then random
// hex and "/".
func namespace(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	var b strings.Builder
	for _, r := range name {
		if r < 0x80 && (r == '-' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')) {
			b.WriteRune(r)
		}
		if b.Len() == 40 {
			break
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return b.String() + "-" + hex.EncodeToString(rnd[:]) + "/"
}

// emptyStore deletes every key s lists: the default cleanup of a
// namespace. A key it cannot delete does not stop it; every error is
// returned.
func emptyStore(ctx context.Context, s *storage.Store) error {
	var keys []string
	var errs []error
	for k, err := range s.List(ctx, "") {
		if err != nil {
			errs = append(errs, err)
			break
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := s.Delete(ctx, k, storage.Condition{}); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d keys listed: %w", len(keys), errors.Join(errs...))
	}
	return nil
}
