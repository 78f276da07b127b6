package sqlitestore_test

import (
	"context"
	"errors"
	"io"
	"iter"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

// twoHandles is one file opened twice, as by two processes (each handle
// has its own connections, group commit and turn at the lock): calls
// alternate between them, so every race of the suite is also a race
// between handles.
type twoHandles struct {
	h    [2]driver.Store
	next atomic.Uint32
}

func (t *twoHandles) pick() driver.Store { return t.h[t.next.Add(1)%2] }

func (t *twoHandles) Get(ctx context.Context, key string) ([]byte, driver.Version, error) {
	return t.pick().Get(ctx, key)
}

func (t *twoHandles) Put(ctx context.Context, key string, value []byte, cond driver.Condition) (driver.Version, error) {
	return t.pick().Put(ctx, key, value, cond)
}

func (t *twoHandles) Delete(ctx context.Context, key string, cond driver.Condition) error {
	return t.pick().Delete(ctx, key, cond)
}

func (t *twoHandles) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return t.pick().ListAfter(ctx, prefix, after)
}

// Watch watches through one handle; writes through the other reach it by
// the doorbell.
func (t *twoHandles) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return t.pick().(driver.Watcher).Watch(ctx, prefix)
}

func (t *twoHandles) Close() error {
	return errors.Join(t.h[0].(io.Closer).Close(), t.h[1].(io.Closer).Close())
}

// TestConformanceTwoHandles runs the whole conformance suite, its
// linearizability and A-B-A checks included, on one file through two
// handles at once.
func TestConformanceTwoHandles(t *testing.T) {
	storetest.TestDriver(t, func(t *testing.T) driver.Store {
		path := filepath.Join(t.TempDir(), "store.db")
		var th twoHandles
		for i := range th.h {
			d, err := sqlitestore.NewDriver(context.Background(), sqlitestore.Config{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			th.h[i] = d
		}
		t.Cleanup(func() { _ = th.Close() })
		return &th
	}, storetest.Capabilities{})
}
