package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

// TestSuiteThroughNamespaces runs the suite through the namespaces harness
// on directories of one root, as the conveyor command runs it on an
// existing store: every check gets its own directory, and none is left.
func TestSuiteThroughNamespaces(t *testing.T) {
	root := t.TempDir()
	var opened sync.Map
	h := namespaces{
		Open: func(_ context.Context, ns string) (driver.Store, error) {
			if _, dup := opened.LoadOrStore(ns, true); dup {
				return nil, fmt.Errorf("namespace %s handed out twice", ns)
			}
			return filestore.NewDriver(filepath.Join(root, ns))
		},
		Remove: func(ctx context.Context, ns string, s *storage.Store) error {
			err := emptyStore(ctx, s)
			_ = s.Close()
			return errors.Join(err, os.RemoveAll(filepath.Join(root, ns)))
		},
	}
	t.Run("suite", func(t *testing.T) { storetest.Run(t, h) })
	n := 0
	opened.Range(func(any, any) bool { n++; return true })
	if n != len(storetest.Checks()) {
		t.Errorf("%d namespaces opened, want one per check (%d)", n, len(storetest.Checks()))
	}
	left, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

// TestEmptyStore: the default cleanup deletes every key.
func TestEmptyStore(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	for _, k := range []string{"a", "b/c", "b/d/e"} {
		if _, err := s.Put(t.Context(), k, []byte(k), storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := emptyStore(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	for k, err := range s.List(t.Context(), "") {
		t.Errorf("left: %q %v", k, err)
	}
}

func TestNamespace(t *testing.T) {
	t.Parallel()
	a, b := namespace("TestX/Conformance/Put Conditions(1)"), namespace("TestX/Conformance/Put Conditions(1)")
	if a == b || !strings.HasPrefix(a, "PutConditions1-") || !strings.HasSuffix(a, "/") {
		t.Errorf("Namespace = %q, %q: want distinct PutConditions1-<hex>/", a, b)
	}
	if err := storekey.ValidateKey(strings.TrimSuffix(a, "/")); err != nil {
		t.Errorf("Namespace %q is no valid key: %v", a, err)
	}
}
