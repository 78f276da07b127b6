package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

type doc struct {
	State string           `json:"state"`
	Lease *lifecycle.Lease `json:"lease,omitempty"`
	lifecycle.Meta
}

func leaseOf(d *doc) *lifecycle.Lease { return d.Lease }

func mustCreate(t *testing.T, s *storage.Store, key string, d doc) storage.Version {
	t.Helper()
	b, _ := json.Marshal(&d)
	v, err := s.Put(context.Background(), key, b, storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRecordFencesALostOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	mustCreate(t, s, "r.json", doc{State: "running", Lease: &lifecycle.Lease{Owner: "a", Epoch: 1, ExpiresAt: t0}})
	a := &core.Record[doc, *doc]{Store: s, Key: "r.json", Lease: leaseOf, Owner: "a", Epoch: 1}
	if _, _, err := a.Apply(ctx, func(d *doc) error { d.State = "step"; return nil }); err != nil {
		t.Fatalf("owner's write: %v", err)
	}
	// b takes over at epoch 2 (the lease lapsed while a was paused).
	b := &core.Record[doc, *doc]{Store: s, Key: "r.json", Lease: leaseOf, Owner: "b", Epoch: 2}
	taken := &core.Record[doc, *doc]{Store: s, Key: "r.json"}
	if _, _, err := taken.Apply(ctx, func(d *doc) error { d.Lease = &lifecycle.Lease{Owner: "b", Epoch: 2}; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Apply(ctx, func(d *doc) error { d.State = "completed"; return nil }); err != nil {
		t.Fatalf("new owner's write: %v", err)
	}
	before, _, _ := s.Get(ctx, "r.json")
	// a wakes up with its cached version and writes: refused, nothing written.
	_, _, err := a.Apply(ctx, func(d *doc) error { d.State = "failed"; return nil })
	var lost *lifecycle.LeaseLostError
	if !errors.Is(err, lifecycle.ErrLeaseLost) || !errors.As(err, &lost) || lost.HolderEpoch != 2 || lost.Holder != "b" {
		t.Fatalf("late owner's write: %v, want a LeaseLostError naming b at epoch 2", err)
	}
	after, _, _ := s.Get(ctx, "r.json")
	if string(after) != string(before) {
		t.Fatalf("late write landed: %s", after)
	}
}

func TestRecordJudgesARefusalOnFreshState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	mustCreate(t, s, "r.json", doc{State: "queued"})
	r := &core.Record[doc, *doc]{Store: s, Key: "r.json"}
	if _, _, err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	other := &core.Record[doc, *doc]{Store: s, Key: "r.json"}
	if _, _, err := other.Apply(ctx, func(d *doc) error { d.State = "running"; return nil }); err != nil {
		t.Fatal(err)
	}
	// r's cache says queued; the change needs running: it must re-read, not refuse.
	_, after, err := r.Apply(ctx, func(d *doc) error {
		if d.State != "running" {
			return errors.New("not running")
		}
		d.State = "completed"
		return nil
	})
	if err != nil || after.State != "completed" || after.Version != 2 {
		t.Fatalf("Apply = %+v, %v; want completed at counter 2", after, err)
	}
}

func TestRecordReportsPoison(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name     string
		body     string
		validate func(*doc) error
		reason   string
	}{
		{"garbage", "{not json", nil, "cannot decode"},
		{"wrong type", `{"state": 7}`, nil, "cannot decode"},
		{"invalid", `{"state": "sideways"}`, func(d *doc) error {
			if d.State != "queued" {
				return errors.New("unknown state")
			}
			return nil
		}, "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			v, _ := s.Put(ctx, "r.json", []byte(tt.body), storage.IfNotExists())
			r := &core.Record[doc, *doc]{Store: s, Key: "r.json", Validate: tt.validate}
			_, _, err := r.Apply(ctx, func(d *doc) error { return nil })
			var ce *lifecycle.QuarantinedError
			if !errors.Is(err, lifecycle.ErrCorrupt) || !errors.As(err, &ce) || ce.Version != string(v) || string(ce.Data) != tt.body || ce.Reason != tt.reason {
				t.Fatalf("Apply on %s: %v, want a CorruptError with the bytes and version", tt.body, err)
			}
			qkey, err := records.Quarantine(ctx, s, ce, t0)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Get(ctx, "r.json"); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("original still there after quarantine: %v", err)
			}
			var got []records.Quarantined
			for q, err := range records.ListQuarantine(ctx, s) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, q)
			}
			if len(got) != 1 || got[0].QKey != qkey || got[0].Key != "r.json" || string(got[0].Data) != tt.body || !got[0].QuarantinedAt.Equal(t0) {
				t.Fatalf("quarantine lists %+v", got)
			}
			if err := records.Restore(ctx, s, qkey, nil); err != nil {
				t.Fatal(err)
			}
			if b, _, err := s.Get(ctx, "r.json"); err != nil || string(b) != tt.body {
				t.Fatalf("restored %q, %v", b, err)
			}
		})
	}
}

func TestPutFencedKeepsTheNewerOwnersObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	epochOf := func(b []byte) (int64, bool) {
		var v struct{ Epoch int64 }
		return v.Epoch, json.Unmarshal(b, &v) == nil
	}
	put := func(epoch int64, body string) error {
		_, err := core.PutFenced(ctx, s, "m.json", []byte(body), "w", epoch, epochOf)
		return err
	}
	if err := put(1, `{"epoch":1,"by":"old"}`); err != nil {
		t.Fatal(err)
	}
	if err := put(2, `{"epoch":2,"by":"new"}`); err != nil {
		t.Fatalf("newer epoch replacing an older object: %v", err)
	}
	if err := put(1, `{"epoch":1,"by":"late"}`); !errors.Is(err, lifecycle.ErrLeaseLost) {
		t.Fatalf("older epoch over a newer object: %v, want ErrLeaseLost", err)
	}
	if b, _, _ := s.Get(ctx, "m.json"); string(b) != `{"epoch":2,"by":"new"}` {
		t.Fatalf("object is %s", b)
	}
}

func TestUnitsAbandonCodeThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	u := &core.Units{Clock: clk}
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := core.Do(context.Background(), u, "step research", time.Minute, func(context.Context) (int, error) {
			<-release // ignores its context
			return 1, nil
		})
		done <- err
	}()
	<-clk.WaitForTimers(1)
	clk.Advance(time.Minute)
	err := <-done
	var oe *core.OverrunError
	if !errors.As(err, &oe) || !errors.Is(err, context.DeadlineExceeded) || oe.Limit != time.Minute {
		t.Fatalf("Do = %v, want an OverrunError at 1m", err)
	}
	if live, total := u.Stragglers(); live != 1 || total != 1 {
		t.Fatalf("Stragglers = %d, %d; want 1 live of 1", live, total)
	}
	grace, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if n := u.Wait(grace); n != 1 {
		t.Fatalf("Wait with a straggler = %d, want 1 (bounded by its context)", n)
	}
	close(release)
	if n := u.Wait(context.Background()); n != 0 {
		t.Fatalf("Wait after the straggler returned = %d", n)
	}
	if live, total := u.Stragglers(); live != 0 || total != 1 {
		t.Fatalf("Stragglers = %d, %d; want 0 live of 1", live, total)
	}
}

func TestUnitsResults(t *testing.T) {
	t.Parallel()
	u := &core.Units{Clock: clock.NewFake(t0)}
	boom := errors.New("boom")
	tests := []struct {
		name string
		fn   func(context.Context) (int, error)
		ctx  func() context.Context
		want func(int, error) bool
	}{
		{"value", func(context.Context) (int, error) { return 7, nil }, context.Background,
			func(v int, err error) bool { return v == 7 && err == nil }},
		{"error", func(context.Context) (int, error) { return 0, boom }, context.Background,
			func(_ int, err error) bool { return errors.Is(err, boom) }},
		{"panic", func(context.Context) (int, error) { panic("bad step") }, context.Background,
			func(_ int, err error) bool {
				var pe *core.PanicError
				return errors.As(err, &pe) && pe.Value == "bad step"
			}},
		{"caller canceled", func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() },
			func() context.Context {
				ctx, cancel := context.WithCancelCause(context.Background())
				cancel(boom)
				return ctx
			},
			func(_ int, err error) bool { return errors.Is(err, boom) }},
	}
	for _, tt := range tests {
		v, err := core.Do(tt.ctx(), u, tt.name, time.Hour, tt.fn)
		if !tt.want(v, err) {
			t.Errorf("%s: Do = %v, %v", tt.name, v, err)
		}
	}
	u.Wait(context.Background())
}

func TestHeartbeatFromLastRenewal(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	var renewed atomic.Int64
	renewed.Store(t0.UnixNano())
	last := func() time.Time { return time.Unix(0, renewed.Load()) }
	beats := make(chan time.Time, 10)
	stop := core.Heartbeat(context.Background(), clk, 10*time.Second, last, func(context.Context) bool {
		now := clk.Now()
		renewed.Store(now.UnixNano())
		beats <- now
		return now.Before(t0.Add(time.Minute))
	})
	defer stop()
	<-clk.WaitForTimers(1)
	// An owner write renews at +5s: the beat moves to +15s.
	renewed.Store(t0.Add(5 * time.Second).UnixNano())
	clk.Advance(10 * time.Second)
	<-clk.WaitForTimers(1) // re-armed for +15s, no beat
	select {
	case b := <-beats:
		t.Fatalf("beat at %v although the lease was renewed at +5s", b)
	default:
	}
	clk.Advance(5 * time.Second)
	if b := <-beats; !b.Equal(t0.Add(15 * time.Second)) {
		t.Fatalf("beat at %v, want +15s", b)
	}
	// Lagging: time jumps 2 minutes; one overdue beat fires at once and, past
	// a minute, returns false: the heartbeat ends by itself.
	<-clk.WaitForTimers(1)
	clk.Advance(2 * time.Minute)
	<-beats
	stop()
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers left after stop", n)
	}
}

// Units that return exactly as their limit strikes are either taken or
// abandoned, never both: the count of live stragglers ends at zero once
// every goroutine has returned (found by review: a unit returning between
// the caller's last look and its abandonment stayed counted for good).
func TestUnitsCountIsExactAtTheLimit(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	u := &core.Units{Clock: clk}
	for range 2000 {
		release := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = core.Do(context.Background(), u, "racy", time.Second, func(context.Context) (int, error) {
				<-release
				return 1, nil
			})
		}()
		<-clk.WaitForTimers(1)
		go clk.Advance(time.Second)
		close(release) // races the limit
		<-done
	}
	if n := u.Wait(context.Background()); n != 0 {
		t.Fatalf("Wait = %d", n)
	}
	if live, _ := u.Stragglers(); live != 0 {
		t.Fatalf("%d stragglers counted live after every unit returned", live)
	}
}

// Two processes that read the same poison version quarantine it once: the
// late one must not delete the record the first wrote in its place (a
// conditional Delete is not atomic on MinIO, so only one may try).
func TestQuarantineOfOneVersionDeletesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	v, _ := s.Put(ctx, "queue/agents/a.json", []byte("junk"), storage.IfNotExists())
	ce := &lifecycle.QuarantinedError{Key: "queue/agents/a.json", Version: string(v), Data: []byte("junk"), Reason: "cannot decode"}
	q1, err := records.Quarantine(ctx, s, ce, t0)
	if err != nil {
		t.Fatal(err)
	}
	// The first process writes a good record in the poison's place.
	if _, err := s.Put(ctx, ce.Key, []byte(`{"agent":"a"}`), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	// The second read the same poison version and quarantines it late.
	q2, err := records.Quarantine(ctx, s, ce, t0.Add(time.Second))
	if err != nil || q2 != q1 {
		t.Fatalf("late quarantine of the same version: %q, %v; want %q, nil", q2, err, q1)
	}
	if b, _, err := s.Get(ctx, ce.Key); err != nil || string(b) != `{"agent":"a"}` {
		t.Fatalf("the record written in the poison's place: %q, %v", b, err)
	}
	n := 0
	for _, err := range records.ListQuarantine(ctx, s) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d quarantine copies of one version, want 1", n)
	}
}

// A fenced Record with Now refuses to write on a lease that lapsed, even if
// no one took it over; Confirm reports a lost lease without writing.
func TestRecordRefusesALapsedLeaseAndConfirms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	mustCreate(t, s, "r.json", doc{State: "running", Lease: &lifecycle.Lease{Owner: "a", Epoch: 1, ExpiresAt: t0.Add(time.Minute)}})
	a := &core.Record[doc, *doc]{Store: s, Key: "r.json", Lease: leaseOf, Owner: "a", Epoch: 1, Now: clk.Now}
	if err := a.Confirm(ctx); err != nil {
		t.Fatalf("Confirm of a live lease: %v", err)
	}
	clk.Advance(time.Minute)
	before, _, _ := s.Get(ctx, "r.json")
	_, _, err := a.Apply(ctx, func(d *doc) error { d.State = "completed"; return nil })
	var lost *lifecycle.LeaseLostError
	if !errors.As(err, &lost) || !lost.Expired {
		t.Fatalf("write on a lapsed lease: %v, want a LeaseLostError marked Expired", err)
	}
	if err := a.Confirm(ctx); !errors.Is(err, lifecycle.ErrLeaseLost) {
		t.Fatalf("Confirm of a lapsed lease: %v", err)
	}
	if after, _, _ := s.Get(ctx, "r.json"); string(after) != string(before) {
		t.Fatalf("a lapsed owner's write landed: %s", after)
	}
	if !core.LeaseCertain(t0.Add(time.Minute), t0.Add(50*time.Second), time.Minute) || core.LeaseCertain(t0.Add(time.Minute), t0.Add(55*time.Second), time.Minute) {
		t.Fatal("LeaseCertain keeps a tenth of the ttl as margin")
	}
}

func TestQuarantinerCountsAndLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	v, _ := s.Put(ctx, "jobs/x.json", []byte("{junk"), storage.IfNotExists())
	var buf strings.Builder
	q := &core.Quarantiner{Store: s, Clock: clock.NewFake(t0), Log: slog.New(slog.NewTextHandler(&buf, nil))}
	ce := &lifecycle.QuarantinedError{Key: "jobs/x.json", Version: string(v), Data: []byte("{junk"), Reason: "cannot decode"}
	if _, err := q.Move(ctx, ce); err != nil {
		t.Fatal(err)
	}
	if q.Count() != 1 || !strings.Contains(buf.String(), "record_quarantined") {
		t.Fatalf("count %d, log %q", q.Count(), buf.String())
	}
}
