package run_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// faultyStore fails Puts whose key matches, with errInjected: after letting
// skip of them through, the next n.
type faultyStore struct {
	driver.Store
	mu    sync.Mutex
	rules []*fault
}

type fault struct {
	match   func(key string) bool
	skip, n int
}

var errInjected = errors.New("injected store failure")

func (f *faultyStore) fail(skip, n int, match func(string) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, &fault{match: match, skip: skip, n: n})
}

func (f *faultyStore) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	f.mu.Lock()
	for _, r := range f.rules {
		if r.n > 0 && r.match(key) {
			if r.skip > 0 {
				r.skip--
				continue
			}
			r.n--
			f.mu.Unlock()
			return "", errInjected
		}
	}
	f.mu.Unlock()
	return f.Store.Put(ctx, key, v, c)
}

func isStatus(key string) bool      { return strings.HasSuffix(key, "/status.json") }
func isIdempotency(key string) bool { return strings.HasPrefix(key, "idempotency/") }

func TestIdempotencyFailedRequestIsRetried(t *testing.T) {
	t.Parallel()
	faulty := &faultyStore{Store: memStore(t)}
	g := newRig(t, storage.New(faulty))
	agent := run.Agent{Slug: "retry", Steps: []run.Step{okStep("s")}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	req := lifecycle.SubmitRequest{AgentSlug: agent.Slug, IdempotencyKey: "slack:T12345678:1234567890.123456"}

	faulty.fail(0, 1, isStatus)
	if _, err := r.Submit(ctx, req); !errors.Is(err, errInjected) {
		t.Fatalf("first submit: %v", err)
	}
	rec, err := r.Idempotency(ctx, req.IdempotencyKey)
	if err != nil || rec.Status != idemrecord.Failed || !strings.Contains(rec.Error, "injected") ||
		!rec.ExpiresAt.Equal(g.clock.Now().Add(time.Hour)) {
		t.Fatalf("record after failure: %+v %v", rec, err)
	}
	// A failed request with attempts left is tried again, under the same
	// run id (one generation, one run).
	res, err := r.Submit(ctx, req)
	if err != nil || res.Duplicate || res.RunID != rec.RunID {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if st := g.wait(r, res.RunID, 0, 0); st.Status != "completed" {
		t.Fatalf("retried run %s", st.Status)
	}
	again, err := r.Submit(ctx, req)
	if err != nil || !again.Duplicate || again.RunID != res.RunID {
		t.Fatalf("after success: %+v %v", again, err)
	}
}

func TestIdempotencyLapsedLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	faulty := &faultyStore{Store: memStore(t)}
	g := newRig(t, storage.New(faulty))
	agent := run.Agent{Slug: "lock", Steps: []run.Step{okStep("s")}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	req := lifecycle.SubmitRequest{AgentSlug: agent.Slug, IdempotencyKey: "scheduler:daily-cleanup:2024-12-19T00:00:00Z"}

	// The first submitter "dies" after creating its record: the run is never
	// written and the record stays processing.
	faulty.fail(0, 1, isStatus)
	faulty.fail(1, 1, isIdempotency) // the create passes; the update that would mark it failed does not
	if _, err := r.Submit(ctx, req); err == nil {
		t.Fatal("first submit succeeded")
	}
	first, err := r.Idempotency(ctx, req.IdempotencyKey)
	if err != nil || first.Status != idemrecord.Processing || first.LeaseOwner == "" {
		t.Fatalf("record %+v %v", first, err)
	}
	// Past the lease the next submit takes the record over and creates
	// that run (before the lapse, a duplicate writes it too:
	// TestIdempotencyAnswers).
	g.clock.Advance(20*time.Second + time.Second)
	res, err := r.Submit(ctx, req)
	if err != nil || !res.Duplicate || res.RunID != first.RunID {
		t.Fatalf("takeover: %+v %v", res, err)
	}
	if st := g.wait(r, res.RunID, 0, 0); st.Status != "completed" || st.IdempotencyKey != req.IdempotencyKey {
		t.Fatalf("run %+v", st)
	}
	rec, _ := r.Idempotency(ctx, req.IdempotencyKey)
	if rec.Status != idemrecord.Completed || rec.Attempts != 2 || rec.LeaseExpiresAt != nil {
		t.Errorf("record %+v", rec)
	}
}

// TestRefusedControlCallCostsTwoReads: cancelling a finished run reads the
// run index and the status once each, judges the refusal on that fresh
// read, and writes nothing.
func TestRefusedControlCallCostsTwoReads(t *testing.T) {
	t.Parallel()
	counting := &teststores.Counting{Store: memStore(t)}
	g := newRig(t, storage.New(counting))
	agent := run.Agent{Slug: "done", Machine: lifecycle.MachineCancelable, Steps: []run.Step{okStep("s")}}
	r, _ := g.runner("a", nil, agent)
	id := submit(t, r, agent.Slug)
	if st := g.wait(r, id, 0, 0); st.Status != "succeeded" {
		t.Fatalf("run %s", st.Status)
	}
	until(t, "cleanup", func() bool {
		for range storage.New(counting.Store).List(context.Background(), "index/active/") {
			return false
		}
		return true
	})
	// The run's last writes (its audit events) follow the cleanup: count
	// from when the runner waits on the clock again, its work done.
	g.idle()
	counting.Reset()
	if _, err := r.Cancel(context.Background(), id, lifecycle.ActorGateway, run.CancelRequest{Reason: "late"}); !errors.Is(err, lifecycle.ErrTerminalState) {
		t.Fatalf("cancel: %v", err)
	}
	if got := [2]int64{counting.Gets.Load(), counting.Puts.Load() + counting.Deletes.Load()}; got != [2]int64{2, 0} {
		t.Errorf("gets, writes = %v, want [2 0]", got)
	}
}
