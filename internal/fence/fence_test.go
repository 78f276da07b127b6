package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
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
	a := &fence.Record[doc, *doc]{Store: s, Key: "r.json", Lease: leaseOf, Owner: "a", Epoch: 1}
	if _, _, err := a.Apply(ctx, func(d *doc) error { d.State = "step"; return nil }); err != nil {
		t.Fatalf("owner's write: %v", err)
	}
	// b takes over at epoch 2 (the lease lapsed while a was paused).
	b := &fence.Record[doc, *doc]{Store: s, Key: "r.json", Lease: leaseOf, Owner: "b", Epoch: 2}
	taken := &fence.Record[doc, *doc]{Store: s, Key: "r.json"}
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
	r := &fence.Record[doc, *doc]{Store: s, Key: "r.json"}
	if _, _, err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	other := &fence.Record[doc, *doc]{Store: s, Key: "r.json"}
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
			r := &fence.Record[doc, *doc]{Store: s, Key: "r.json", Validate: tt.validate}
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

// A fenced Record with Now refuses to write on a lease that lapsed, even if
// no one took it over; Confirm reports a lost lease without writing.
func TestRecordRefusesALapsedLeaseAndConfirms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	mustCreate(t, s, "r.json", doc{State: "running", Lease: &lifecycle.Lease{Owner: "a", Epoch: 1, ExpiresAt: t0.Add(time.Minute)}})
	a := &fence.Record[doc, *doc]{Store: s, Key: "r.json", Lease: leaseOf, Owner: "a", Epoch: 1, Now: clk.Now}
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
	if !fence.LeaseCertain(t0.Add(time.Minute), t0.Add(50*time.Second), time.Minute) || fence.LeaseCertain(t0.Add(time.Minute), t0.Add(55*time.Second), time.Minute) {
		t.Fatal("LeaseCertain keeps a tenth of the ttl as margin")
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
		_, err := fence.Put(ctx, s, "m.json", []byte(body), "w", epoch, epochOf)
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

// On a store that settles, a create-only write taken over a newer owner's
// object replaced it with a lost writer's: the fencing did not hold.
func TestPutFencedOnAStoreThatSettles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := faultstore.New(memstore.New())
	fs.SetSettle(10*time.Second, nil)
	epochOf := func(b []byte) (int64, bool) {
		var v struct{ Epoch int64 }
		return v.Epoch, json.Unmarshal(b, &v) == nil
	}
	if _, err := fence.Put(ctx, storage.New(fs), "m.json", []byte(`{"epoch":2,"by":"new"}`), "w", 2, epochOf); err != nil {
		t.Fatal(err)
	}
	fs.AcceptCreateOver(1)
	if _, err := fence.Put(ctx, storage.New(fs), "m.json", []byte(`{"epoch":1,"by":"late"}`), "w", 1, epochOf); !errors.Is(err, lifecycle.ErrLeaseLost) {
		t.Fatalf("older epoch over a newer object: %v, want ErrLeaseLost", err)
	}
	if b, _, _ := fs.Get(ctx, "m.json"); string(b) != `{"epoch":2,"by":"new"}` {
		t.Fatalf("object is %s (%d creates taken over)", b, fs.Faults().DoubleCreates)
	}
}

func TestHeartbeatFromLastRenewal(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	var renewed atomic.Int64
	renewed.Store(t0.UnixNano())
	last := func() time.Time { return time.Unix(0, renewed.Load()) }
	beats := make(chan time.Time, 10)
	stop := fence.Heartbeat(context.Background(), clk, 10*time.Second, last, func(context.Context) bool {
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

// TestRecordKeepsUnknownMembers: Apply writes back, unchanged, the members
// of the stored record its type does not know (a newer release's); a
// Create, and every write after it, holds none.
func TestRecordKeepsUnknownMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	if _, err := s.Put(ctx, "r.json", []byte(`{"state":"a","newer":{"x":[1]},"version":4}`), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	r := &fence.Record[doc, *doc]{Store: s, Key: "r.json"}
	for _, state := range []string{"b", "c"} {
		if _, _, err := r.Apply(ctx, func(d *doc) error { d.State = state; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if b, _, _ := s.Get(ctx, "r.json"); string(b) != `{"state":"c","version":6,"newer":{"x":[1]}}` {
		t.Errorf("rewritten as %s", b)
	}
	d, _ := r.Snapshot()
	c := &fence.Record[doc, *doc]{Store: s, Key: "c.json"}
	if _, err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Apply(ctx, func(d *doc) error { d.State = "d"; return nil }); err != nil {
		t.Fatal(err)
	}
	if b, _, _ := s.Get(ctx, "c.json"); string(b) != `{"state":"d","version":2}` {
		t.Errorf("created from a document with unknown members: %s", b)
	}
}

// noCommit hides the Commit of the store under it, as filestore has none.
type noCommit struct{ driver.Store }

// landedUnknown commits through the store under it, then answers
// ErrOutcomeUnknown, as a commit whose answer was lost.
type landedUnknown struct{ driver.Store }

func (l landedUnknown) Commit(ctx context.Context, ws []driver.Write) ([]driver.Version, error) {
	if _, err := l.Store.(driver.Committer).Commit(ctx, ws); err != nil {
		return nil, err
	}
	return nil, &driver.OpError{Op: "commit", Key: ws[0].Key, Kind: storage.ErrOutcomeUnknown}
}

// TestApplyWith: on a store that commits, the record's write and the
// others land in one commit under the record's IfMatch (a stale version
// is re-read and judged again, as Apply's), the record stored as Trim
// shapes it; another write's refused condition, or a store that cannot
// commit, leaves the record's write alone, untrimmed; a lost lease writes
// nothing. The document returned is never trimmed; the cached one is the
// stored one.
func TestApplyWith(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		noCommit   bool
		unknown    bool // the commit lands, its answer is ErrOutcomeUnknown
		otherThere bool // the other key exists before: its create-only write is refused
		meddle     bool // someone writes the record between the owner's read and write
		lost       bool // the lease was taken over
		committed  bool
		wantErr    error
	}{
		{name: "commits", committed: true},
		{name: "stale version, re-read, commits", meddle: true, committed: true},
		{name: "other write refused: the record alone", otherThere: true},
		{name: "store cannot commit: the record alone", noCommit: true},
		{name: "landed, outcome unknown: read back as written, trimmed", unknown: true, committed: true},
		{name: "lease lost: nothing", lost: true, wantErr: lifecycle.ErrLeaseLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := memstore.New()
			switch {
			case tc.noCommit:
				s = storage.New(noCommit{s.Unwrap()})
			case tc.unknown:
				s = storage.New(landedUnknown{s.Unwrap()})
			}
			v := mustCreate(t, s, "r.json", doc{State: "running", Lease: &lifecycle.Lease{Owner: "a", Epoch: 1, ExpiresAt: t0}})
			if tc.otherThere {
				mustCreate(t, s, "other.json", doc{State: "old"})
			}
			r := &fence.Record[doc, *doc]{Store: s, Key: "r.json", Lease: leaseOf, Owner: "a", Epoch: 1,
				Trim: func(d *doc) { d.Lease = nil }}
			r.Seed(doc{State: "running", Lease: &lifecycle.Lease{Owner: "a", Epoch: 1, ExpiresAt: t0}}, v)
			if tc.meddle || tc.lost {
				lease := &lifecycle.Lease{Owner: "a", Epoch: 1, ExpiresAt: t0}
				if tc.lost {
					lease = &lifecycle.Lease{Owner: "b", Epoch: 2, ExpiresAt: t0}
				}
				m := &fence.Record[doc, *doc]{Store: s, Key: "r.json"}
				if _, _, err := m.Apply(ctx, func(d *doc) error { d.Lease = lease; return nil }); err != nil {
					t.Fatal(err)
				}
			}
			also := func(d *doc) ([]storage.Write, error) {
				b, _ := json.Marshal(doc{State: "audit of " + d.State})
				return []storage.Write{{Key: "other.json", Value: b, Cond: storage.IfNotExists()}}, nil
			}
			_, after, committed, err := r.ApplyWith(ctx, func(d *doc) error { d.State = "done"; return nil }, also)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("ApplyWith: %v, want %v", err, tc.wantErr)
			}
			if committed != tc.committed {
				t.Fatalf("committed %v, want %v", committed, tc.committed)
			}
			got, _, _ := s.Get(ctx, "r.json")
			var stored doc
			_ = json.Unmarshal(got, &stored)
			if wantState := map[bool]string{true: "running", false: "done"}[tc.lost]; stored.State != wantState {
				t.Fatalf("record %s, want state %q", got, wantState)
			}
			other, _, oerr := s.Get(ctx, "other.json")
			switch {
			case tc.otherThere && !json.Valid(other):
				t.Fatalf("other key: %s", other)
			case tc.otherThere:
				var o doc
				_ = json.Unmarshal(other, &o)
				if o.State != "old" {
					t.Fatalf("other key overwritten: %s", other)
				}
			case tc.committed && (oerr != nil || !bytesContain(other, "audit of done")):
				t.Fatalf("other key %s, %v: want the commit's", other, oerr)
			case !tc.committed && !errors.Is(oerr, storage.ErrNotFound):
				t.Fatalf("other key %s, %v: want none", other, oerr)
			}
			if err == nil && (after.State != "done" || after.Lease == nil) {
				t.Fatalf("after %+v: want the changed document, lease kept", after)
			}
			if err != nil {
				return
			}
			if want := map[bool]int64{false: 1, true: 2}[tc.meddle]; stored.Version != want {
				t.Fatalf("record %s: version %d, want %d (one write of ours)", got, stored.Version, want)
			}
			if trimmed := stored.Lease == nil; trimmed != tc.committed {
				t.Fatalf("record %s: trimmed %v, want %v (trimmed when the other write rode in its commit)", got, trimmed, tc.committed)
			}
			if cached, cv := r.Snapshot(); (cached.Lease == nil) != tc.committed || cv == "" {
				t.Fatalf("cached %+v at %q: want the stored document %s", cached, cv, got)
			}
		})
	}
}

func bytesContain(b []byte, s string) bool { return strings.Contains(string(b), s) }

// TestApplyJoint: the record's write and must's land in one commit, all or
// none: must's refused condition writes nothing and is returned (where
// ApplyWith would write the record alone); also's refused condition is
// dropped as ApplyWith drops it; a stale record version is re-read and
// judged again; must's versions come back; a store that cannot commit
// writes nothing.
func TestApplyJoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		noCommit   bool
		lockMoved  bool // must's key changed since its version was read
		auditThere bool // also's create-only write is refused
		meddle     bool
		wantErr    error
		written    bool // the record and must's key written
		committed  bool // also's write landed
	}{
		{name: "commits all three", written: true, committed: true},
		{name: "stale record, re-read, commits", meddle: true, written: true, committed: true},
		{name: "must refused: nothing", lockMoved: true, wantErr: storage.ErrPreconditionFailed},
		{name: "also refused: the record and must", auditThere: true, written: true},
		{name: "store cannot commit: nothing", noCommit: true, wantErr: errors.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := memstore.New()
			if tc.noCommit {
				s = storage.New(noCommit{s.Unwrap()})
			}
			v := mustCreate(t, s, "r.json", doc{State: "queued"})
			lv := mustCreate(t, s, "lock.json", doc{State: "free"})
			if tc.lockMoved {
				if _, err := s.Put(ctx, "lock.json", []byte(`{"state":"taken"}`), storage.IfMatch(lv)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.auditThere {
				mustCreate(t, s, "audit.json", doc{State: "old"})
			}
			r := &fence.Record[doc, *doc]{Store: s, Key: "r.json"}
			r.Seed(doc{State: "queued"}, v)
			if tc.meddle {
				m := &fence.Record[doc, *doc]{Store: s, Key: "r.json"}
				if _, _, err := m.Apply(ctx, func(d *doc) error { d.State = "queued"; return nil }); err != nil {
					t.Fatal(err)
				}
			}
			must := func(d *doc) ([]storage.Write, error) {
				b, _ := json.Marshal(doc{State: "held for " + d.State})
				return []storage.Write{{Key: "lock.json", Value: b, Cond: storage.IfMatch(lv)}}, nil
			}
			also := func(d *doc) ([]storage.Write, error) {
				return []storage.Write{{Key: "audit.json", Value: []byte(`{"state":"audit"}`), Cond: storage.IfNotExists()}}, nil
			}
			_, _, committed, vers, err := r.ApplyJoint(ctx, func(d *doc) error { d.State = "picked"; return nil }, must, also)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("ApplyJoint: %v, want %v", err, tc.wantErr)
			}
			if committed != tc.committed {
				t.Fatalf("committed %v, want %v", committed, tc.committed)
			}
			rec, _, _ := s.Get(ctx, "r.json")
			lock, lockVer, _ := s.Get(ctx, "lock.json")
			if got := bytesContain(rec, "picked") && bytesContain(lock, "held for picked"); got != tc.written {
				t.Fatalf("record %s, lock %s: written %v, want %v", rec, lock, got, tc.written)
			}
			if tc.written && (len(vers) != 1 || vers[0] != lockVer) {
				t.Fatalf("must's versions %v, want [%s]", vers, lockVer)
			}
			if audit, _, _ := s.Get(ctx, "audit.json"); bytesContain(audit, `"audit"`) != tc.committed {
				t.Fatalf("audit %s, committed %v", audit, tc.committed)
			}
		})
	}
}
