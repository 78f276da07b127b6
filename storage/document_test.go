package storage_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cenkalti/backoff/v4"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/storage"
)

type runStatus struct {
	storage.Meta
	RunID  string `json:"run_id"`
	Status string `json:"status"`
	Steps  int    `json:"steps_completed"`
}

func TestCreateRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memstore.New()
	doc := &runStatus{RunID: "r1", Status: "requested"}
	v, err := storage.Create(ctx, s, "r1.json", doc)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Version != 1 {
		t.Fatalf("Create left counter at %d, want 1", doc.Version)
	}
	raw, _, _ := s.Get(ctx, "r1.json")
	if want := `{"version":1,"run_id":"r1","status":"requested","steps_completed":0}`; string(raw) != want {
		t.Fatalf("stored %s, want %s", raw, want)
	}
	got, gv, err := storage.Read[runStatus](ctx, s, "r1.json")
	if err != nil || got != *doc || gv != v {
		t.Fatalf("Read = %+v %q %v, want %+v %q", got, gv, err, *doc, v)
	}
	again := &runStatus{RunID: "r1", Status: "queued"}
	if _, err := storage.Create(ctx, s, "r1.json", again); !errors.Is(err, storage.ErrPreconditionFailed) || again.Version != 0 {
		t.Fatalf("second Create = %v (counter %d), want ErrPreconditionFailed and counter untouched", err, again.Version)
	}
	if _, _, err := storage.Read[runStatus](ctx, s, "missing.json"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Read(missing) = %v", err)
	}
	if err := s.Delete(ctx, "bad.json", storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "bad.json", []byte("{"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := storage.Read[runStatus](ctx, s, "bad.json"); err == nil {
		t.Fatal("Read of malformed JSON succeeded")
	}
}

func TestUpdate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memstore.New()
	if _, err := storage.Create(ctx, s, "r.json", &runStatus{Status: "queued"}); err != nil {
		t.Fatal(err)
	}
	got, v, err := storage.Update(ctx, s, "r.json", func(d *runStatus) error {
		d.Status = "running"
		d.Version = 99 // the counter is the store's business, not the mutation's
		return nil
	})
	if err != nil || got.Status != "running" || got.Version != 2 {
		t.Fatalf("Update = %+v, %v", got, err)
	}
	if _, cur, _ := s.Get(ctx, "r.json"); cur != v {
		t.Fatalf("Update returned version %q, store has %q", v, cur)
	}

	// A mutation's error comes back unchanged and writes nothing.
	errRefused := errors.New("transition refused")
	_, _, err = storage.Update(ctx, s, "r.json", func(d *runStatus) error {
		d.Status = "garbage"
		return errRefused
	})
	if err != errRefused {
		t.Fatalf("Update returned %v, want the mutation's error itself", err)
	}
	if d, cur, _ := storage.Read[runStatus](ctx, s, "r.json"); d.Status != "running" || cur != v {
		t.Fatalf("a failed mutation wrote: %+v at %q", d, cur)
	}

	if _, _, err := storage.Update(ctx, s, "missing.json", func(*runStatus) error { return nil }); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Update(missing) = %v, want ErrNotFound", err)
	}
}

// interferingStore lets another writer change the key just before each of
// the first n conditional Puts, forcing Update to retry on fresh state.
type interferingStore struct {
	storage.Store
	n       atomic.Int32
	retries atomic.Int32
}

func (s *interferingStore) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if cond.Kind() == storage.MatchVersion && s.n.Add(-1) >= 0 {
		s.retries.Add(1)
		if _, _, err := storage.Update(ctx, s.Store, key, func(d *runStatus) error { d.Steps += 10; return nil }); err != nil {
			return "", err
		}
	}
	return s.Store.Put(ctx, key, value, cond)
}

func TestUpdateRetriesOnFreshState(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := &interferingStore{Store: memstore.New()}
	s.n.Store(3)
	if _, err := storage.Create(ctx, s, "r.json", &runStatus{}); err != nil {
		t.Fatal(err)
	}
	runs := 0
	got, _, err := storage.Update(ctx, s, "r.json", func(d *runStatus) error { runs++; d.Steps++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	// 3 interfering updates (+10 each) and ours (+1); ours ran 4 times.
	if got.Steps != 31 || runs != 4 || got.Version != 5 {
		t.Fatalf("got %+v after %d runs, want steps 31, version 5, 4 runs", got, runs)
	}
}

func TestUpdateGivesUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := &interferingStore{Store: memstore.New()}
	s.n.Store(1000)
	if _, err := storage.Create(ctx, s, "r.json", &runStatus{}); err != nil {
		t.Fatal(err)
	}
	_, _, err := storage.Update(ctx, s, "r.json", func(d *runStatus) error { return nil },
		storage.WithBackOff(func() backoff.BackOff { return backoff.WithMaxRetries(&backoff.ZeroBackOff{}, 2) }))
	if !errors.Is(err, storage.ErrPreconditionFailed) || s.retries.Load() != 3 {
		t.Fatalf("Update = %v after %d attempts, want ErrPreconditionFailed after 3", err, s.retries.Load())
	}

	// A context canceled while waiting between attempts stops the loop.
	cctx, cancel := context.WithCancel(ctx)
	_, _, err = storage.Update(cctx, s, "r.json", func(d *runStatus) error { cancel(); return nil },
		storage.WithBackOff(func() backoff.BackOff { return backoff.NewConstantBackOff(1 << 40) }))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Update with a canceled context = %v", err)
	}
}

// TestUpdateConcurrent: 8 goroutines x 25 Updates on one document lose none.
func TestUpdateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memstore.New()
	if _, err := storage.Create(ctx, s, "c.json", &runStatus{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				if _, _, err := storage.Update(ctx, s, "c.json", func(d *runStatus) error { d.Steps++; return nil }); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, _, err := storage.Read[runStatus](ctx, s, "c.json")
	if err != nil || got.Steps != 200 || got.Version != 201 {
		t.Fatalf("after 200 updates: %+v, %v", got, err)
	}
}
