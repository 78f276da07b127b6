package faultstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/storage"
)

// manual is a clock the test moves by hand.
type manual struct {
	mu sync.Mutex
	t  time.Time
}

func (m *manual) Now() time.Time { m.mu.Lock(); defer m.mu.Unlock(); return m.t }
func (m *manual) Add(d time.Duration) {
	m.mu.Lock()
	m.t = m.t.Add(d)
	m.mu.Unlock()
}

func settlingStore(t *testing.T, settle time.Duration) (*faultstore.Store, *manual) {
	t.Helper()
	clk := &manual{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := faultstore.New(memstore.New())
	s.SetSettle(settle, clk.Now)
	for _, k := range []string{"jobs/a", "jobs/b", "other/a"} {
		if _, err := s.Put(context.Background(), k, []byte(k), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
	}
	return s, clk
}

func TestSettlingFaultsAreExactlyTheModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type step struct {
		op      string // get, create, cas, advance
		key     string
		advance time.Duration
		faulted bool // get: false 404; create: accepted over the existing key
	}
	tests := []struct {
		name  string
		arm   func(s *faultstore.Store)
		steps []step
		want  int64
	}{
		{"idle: none", func(*faultstore.Store) {}, []step{
			{op: "get", key: "jobs/a"}, {op: "create", key: "jobs/a"},
		}, 0},
		{"counted 404s, only matching keys", func(s *faultstore.Store) {
			s.Match(func(k string) bool { return strings.HasPrefix(k, "jobs/") })
			s.FalseNotFound(2)
		}, []step{
			{op: "get", key: "other/a"}, {op: "get", key: "jobs/a", faulted: true},
			{op: "get", key: "jobs/missing"}, {op: "get", key: "jobs/b", faulted: true},
			{op: "get", key: "jobs/a"},
		}, 2},
		{"counted creates over existing", func(s *faultstore.Store) { s.AcceptCreateOver(1) }, []step{
			{op: "create", key: "jobs/new"}, {op: "cas", key: "jobs/a"},
			{op: "create", key: "jobs/a", faulted: true}, {op: "create", key: "jobs/b"},
		}, 1},
		{"a disturbance lasts Settle, half open", func(s *faultstore.Store) { s.Disturb() }, []step{
			{op: "get", key: "jobs/a", faulted: true}, {op: "create", key: "jobs/b", faulted: true},
			{op: "cas", key: "jobs/a"},
			{op: "advance", advance: 10*time.Second - time.Nanosecond},
			{op: "get", key: "other/a", faulted: true},
			{op: "advance", advance: time.Nanosecond},
			{op: "get", key: "jobs/a"}, {op: "create", key: "jobs/b"},
		}, 3},
		{"calm ends everything", func(s *faultstore.Store) { s.Disturb(); s.FalseNotFound(3); s.Calm() }, []step{
			{op: "get", key: "jobs/a"}, {op: "create", key: "jobs/a"},
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, clk := settlingStore(t, 10*time.Second)
			tt.arm(s)
			for i, st := range tt.steps {
				switch st.op {
				case "advance":
					clk.Add(st.advance)
				case "get":
					_, _, err := s.Get(ctx, st.key)
					missing := strings.HasSuffix(st.key, "missing")
					if got := errors.Is(err, storage.ErrNotFound); got != (st.faulted || missing) {
						t.Fatalf("step %d get %s: %v, want faulted=%v", i, st.key, err, st.faulted)
					}
				case "create":
					_, err := s.Put(ctx, st.key, []byte("again"), storage.IfNotExists())
					fresh := strings.HasSuffix(st.key, "new")
					if got := err == nil; got != (st.faulted || fresh) {
						t.Fatalf("step %d create %s: %v, want accepted=%v", i, st.key, err, st.faulted)
					}
				case "cas":
					_, err := s.Put(ctx, st.key, []byte("x"), storage.IfMatch("stale"))
					if !errors.Is(err, storage.ErrPreconditionFailed) {
						t.Fatalf("step %d: a stale If-Match was accepted (%v): the model never ignores it", i, err)
					}
				}
			}
			if got := s.Faults().Total(); got != tt.want {
				t.Fatalf("Faults().Total() = %d, want %d", got, tt.want)
			}
			if s.Faults().FalseNotFounds+s.Faults().DoubleCreates != s.Faults().Total() {
				t.Fatal("the tallies do not add up")
			}
		})
	}
}

// A short listing leaves out every matching key, once per listing, for
// the listings counted; then listings are whole again.
func TestShortListLeavesOutMatchingKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := settlingStore(t, time.Second)
	s.Match(func(k string) bool { return strings.HasPrefix(k, "jobs/") })
	list := func() []string {
		var keys []string
		for k, err := range s.ListAfter(ctx, "", "") {
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		return keys
	}
	s.ShortList(2)
	for i, want := range []string{"other/a", "other/a", "jobs/a jobs/b other/a"} {
		if got := strings.Join(list(), " "); got != want {
			t.Errorf("listing %d: %q, want %q", i, got, want)
		}
	}
	if n := s.Faults().Total(); n != 2 {
		t.Errorf("Faults().Total() = %d, want 2 (one a listing)", n)
	}
}

func TestSettleReportedThroughWrappers(t *testing.T) {
	t.Parallel()
	s := faultstore.New(memstore.New())
	if d := storage.New(s).SettleTime(); d != 0 {
		t.Fatalf("a fresh fault store settles in %v, want 0", d)
	}
	s.SetSettle(3*time.Second, nil)
	if d := storage.New(faultstore.New(s)).SettleTime(); d != 3*time.Second {
		t.Fatalf("SettleTime = %v, want 3s", d)
	}
}

// The faults really happen: a create-once check (two writers, one key, each
// told it created it) and a not-found check acting on one read both catch
// them, and evidence.Absence is not fooled by a disturbance.
func TestCheckersCatchTheFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := settlingStore(t, 10*time.Second)
	s.Disturb()

	created := 0
	for range 2 {
		if _, err := s.Put(ctx, "jobs/once", []byte("w"), storage.IfNotExists()); err == nil {
			created++
		}
	}
	if created != 2 {
		t.Fatalf("%d writers were told they created jobs/once, want 2 (the fault did not happen)", created)
	}

	a := &evidence.Absence{Settle: storage.New(s).SettleTime()}
	_, _, err := s.Get(ctx, "jobs/a")
	if !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("get in the window: %v, want a false not-found", err)
	}
	if a.Confirmed("jobs/a", clk.Now()) {
		t.Fatal("one not-found read was believed")
	}
	clk.Add(storage.New(s).SettleTime())
	if _, _, err := s.Get(ctx, "jobs/a"); err != nil {
		t.Fatalf("get Settle after the disturbance: %v, want the key", err)
	}
	a.Found("jobs/a")
	if a.Suspected() != 0 {
		t.Fatal("a found key is still suspected")
	}
	if s.Faults().DoubleCreates != 1 || s.Faults().FalseNotFounds != 1 {
		t.Fatalf("tallies %d double creates, %d false 404s; want 1 and 1", s.Faults().DoubleCreates, s.Faults().FalseNotFounds)
	}
}
