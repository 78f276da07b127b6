package memstore_test

import (
	"context"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/origin"
	"github.com/runconveyor/conveyor/storage"
)

// TestWatchOrigin: the writes of a watch's own origin do not signal it,
// inside the write as every signal is given; those of another origin or
// none do (storetest checks the second on every adapter).
func TestWatchOrigin(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	mine := origin.New()
	wctx, cancel := context.WithCancel(origin.With(t.Context(), mine))
	defer cancel()
	ch, err := s.Watch(wctx, "q/")
	own := origin.With(t.Context(), mine)
	if err != nil {
		t.Fatal(err)
	}
	signalled := func() bool {
		select {
		case <-ch:
			return true
		default: // memstore signals before the write returns
			return false
		}
	}
	for _, tc := range []struct {
		name  string
		write func(context.Context) error
	}{
		{"Put", func(ctx context.Context) error {
			_, err := s.Put(ctx, "q/p", []byte("1"), storage.Condition{})
			return err
		}},
		{"Delete", func(ctx context.Context) error {
			if _, err := s.Put(own, "q/p", []byte("1"), storage.Condition{}); err != nil { // quiet, and a key to delete
				return err
			}
			return s.Delete(ctx, "q/p", storage.Condition{})
		}},
		{"Commit", func(ctx context.Context) error {
			_, err := s.Commit(ctx, []storage.Write{{Key: "q/c", Value: []byte("1")}, {Key: "q/p", Value: []byte("1")}})
			return err
		}},
	} {
		if err := tc.write(own); err != nil {
			t.Fatal(err)
		}
		if signalled() {
			t.Errorf("%s of the watch's own origin signalled it", tc.name)
		}
		for _, ctx := range []context.Context{t.Context(), origin.With(t.Context(), origin.New())} {
			if err := tc.write(ctx); err != nil {
				t.Fatal(err)
			}
			if !signalled() {
				t.Errorf("%s of another origin (or none) did not signal", tc.name)
			}
		}
	}
}
