package storage_test

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestPatientWaitsOutAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	fs := faultstore.New(memstore.New())
	p := storage.New(fs).Patient(storage.Retry{Clock: clk})
	v, err := p.Put(ctx, "k", []byte("1"), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	fs.Down()
	done := make(chan error, 1)
	go func() {
		_, err := p.Put(ctx, "k", []byte("2"), storage.IfMatch(v))
		done <- err
	}()
	for range 5 { // five retries pass during the outage
		<-clk.WaitForTimers(1)
		clk.Advance(3 * time.Second)
	}
	<-clk.WaitForTimers(1)
	fs.Up()
	clk.Advance(3 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Put across a %d-call outage: %v", fs.Failed(), err)
	}
	if b, _, _ := p.Get(ctx, "k"); string(b) != "2" {
		t.Fatalf("value %q", b)
	}
	if p.Retries() < 6 {
		t.Fatalf("retries %d", p.Retries())
	}
}

func TestPatientGivesUpAtTheDeadline(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	fs := faultstore.New(memstore.New())
	p := storage.New(fs).Patient(storage.Retry{Clock: clk})
	fs.Down()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, _, err := p.Get(ctx, "k"); done <- err }()
	<-clk.WaitForTimers(1)
	cancel()
	err := <-done
	var ue *storage.UnavailableError
	if !errors.Is(err, storage.ErrUnavailable) || !errors.Is(err, context.Canceled) || !errors.As(err, &ue) || storage.Transient(err) {
		t.Fatalf("Get on a dead store = %v; want ErrUnavailable and the context's error, not transient", err)
	}
}

func TestPatientReportsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	fs := faultstore.New(memstore.New())
	p := storage.New(fs).Patient(storage.Retry{Clock: clk})
	v, _ := p.Put(ctx, "k", []byte("1"), storage.IfNotExists())
	// Someone else writes between our failed attempt and our retry: the
	// retry's condition fails, but our first attempt might have landed.
	fs.FailNext(1)
	done := make(chan error, 1)
	go func() { _, err := p.Put(ctx, "k", []byte("2"), storage.IfMatch(v)); done <- err }()
	<-clk.WaitForTimers(1)
	if _, err := fs.Store.Put(ctx, "k", []byte("3"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if err := <-done; !errors.Is(err, storage.ErrOutcomeUnknown) {
		t.Fatalf("retried conditional Put = %v, want ErrOutcomeUnknown", err)
	}
}

// breaksMidList is a store whose first listing yields two keys and then
// fails transiently; it records the cursor of every listing.
type breaksMidList struct {
	driver.Store
	mu      sync.Mutex
	cursors []string
}

func (b *breaksMidList) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	b.mu.Lock()
	first := len(b.cursors) == 0
	b.cursors = append(b.cursors, after)
	b.mu.Unlock()
	return func(yield func(string, error) bool) {
		n := 0
		for k, err := range b.Store.ListAfter(ctx, prefix, after) {
			if first && n == 2 {
				yield("", &storage.OpError{Op: "list", Key: prefix, Cause: syscall.ECONNREFUSED})
				return
			}
			n++
			if !yield(k, err) {
				return
			}
		}
	}
}

// TestPatientResumesAListingFromItsCursor: a listing that fails part-way
// is listed again from the last key it yielded, not from the start.
func TestPatientResumesAListingFromItsCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	inner := &breaksMidList{Store: memstore.NewDriver()}
	for _, k := range []string{"l/a", "l/b", "l/c", "l/d", "l/e"} {
		if _, err := inner.Put(ctx, k, nil, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	p := storage.New(inner).Patient(storage.Retry{Clock: clk})
	done := make(chan []string, 1)
	go func() {
		var got []string
		for k, err := range p.ListAfter(ctx, "l/", "l/a") {
			if err != nil {
				t.Error(err)
				break
			}
			got = append(got, k)
		}
		done <- got
	}()
	<-clk.WaitForTimers(1)
	clk.Advance(3 * time.Second)
	got := <-done
	if want := []string{"l/b", "l/c", "l/d", "l/e"}; !slices.Equal(got, want) {
		t.Fatalf("listed %q, want %q", got, want)
	}
	if want := []string{"l/a", "l/c"}; !slices.Equal(inner.cursors, want) {
		t.Fatalf("listings from %q, want %q (from the cursor, then from the last key yielded)", inner.cursors, want)
	}
}

// TestPatientCommits: a patient Store commits when the store it makes
// patient can, retries a refused commit, and reports a retry that finds a
// condition broken as an unknown outcome.
func TestPatientCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	fs := faultstore.New(memstore.New())
	p := storage.New(fs).Patient(storage.Retry{Clock: clk})
	if !p.CanCommit() {
		t.Fatal("a patient memstore cannot commit")
	}
	if storage.New(struct{ driver.Store }{memstore.NewDriver()}).Patient(storage.Retry{Clock: clk}).CanCommit() {
		t.Fatal("a patient store over one that cannot commit can")
	}
	v, err := p.Put(ctx, "a", []byte("1"), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	commit := func(cond storage.Condition) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := p.Commit(ctx, []storage.Write{{Key: "a", Value: []byte("2"), Cond: cond}, {Key: "b", Value: []byte("2")}})
			done <- err
		}()
		return done
	}
	fs.FailNext(1)
	done := commit(storage.IfMatch(v))
	<-clk.WaitForTimers(1)
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("a commit retried after a refusal: %v", err)
	}
	// Someone writes between the refused attempt and the retry.
	fs.FailNext(1)
	done = commit(storage.IfMatch(v))
	<-clk.WaitForTimers(1)
	if _, err := fs.Store.Put(ctx, "a", []byte("3"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if err := <-done; !errors.Is(err, storage.ErrOutcomeUnknown) {
		t.Fatalf("a retried commit whose condition then failed = %v, want ErrOutcomeUnknown", err)
	}
}
