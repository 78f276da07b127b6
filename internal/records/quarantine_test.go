package records_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// checkThenDelete deletes as MinIO does under If-Match: it checks the
// version, then deletes whatever is there. between runs in the gap.
type checkThenDelete struct {
	driver.Store
	between func()
}

func (s *checkThenDelete) Delete(ctx context.Context, key string, cond storage.Condition) error {
	if cond.Kind() == driver.MatchVersion {
		_, v, err := s.Store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) || (err == nil && v != cond.Version()) {
			return storage.ErrPreconditionFailed
		}
		if err != nil {
			return err
		}
		if s.between != nil {
			f := s.between
			s.between = nil
			f()
		}
	}
	return s.Store.Delete(ctx, key, storage.Condition{})
}

// TestQuarantineKeepsARepairRacingTheDelete: a writer repairing a poison
// record by compare-and-swap (or creating it anew) in the gap of a store's
// non-atomic conditional delete keeps its write or is told it failed;
// never is its acknowledged write deleted. On the code before the
// tombstone, the repair landed between the check and the delete and was
// deleted.
func TestQuarantineKeepsARepairRacingTheDelete(t *testing.T) {
	t.Parallel()
	for _, repair := range []string{"if-match the poison", "create"} {
		t.Run(repair, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := &checkThenDelete{Store: memstore.New()}
			const key = "jobs/j1.json"
			pv, err := s.Put(ctx, key, []byte("{poison"), storage.Condition{})
			if err != nil {
				t.Fatal(err)
			}
			good := []byte(`{"job_id":"j1"}`)
			var repairErr error
			repaired := false
			s.between = func() {
				cond := storage.IfMatch(pv)
				if repair == "create" {
					cond = storage.IfNotExists()
				}
				_, repairErr = s.Store.Put(ctx, key, good, cond)
				repaired = repairErr == nil
			}
			ce := &lifecycle.QuarantinedError{Key: key, Version: string(pv), Data: []byte("{poison"), Reason: "test"}
			if _, err := records.Quarantine(ctx, storage.New(s), ce, time.Now()); err != nil {
				t.Fatal(err)
			}
			b, _, err := s.Get(ctx, key)
			switch {
			case repaired && (err != nil || string(b) != string(good)):
				t.Fatalf("the repair was acknowledged, then lost: key holds %q (%v)", b, err)
			case !repaired && !errors.Is(repairErr, storage.ErrPreconditionFailed):
				t.Fatalf("repair: %v, want it refused", repairErr)
			case !repaired && !errors.Is(err, storage.ErrNotFound):
				t.Fatalf("after the quarantine the key holds %q (%v), want it gone", b, err)
			}
		})
	}
}

// TestTombstoneLeftBehindIsCleared: a quarantine that swapped in its
// tombstone and died before deleting it leaves a record that the next
// quarantine, or a Restore, clears.
func TestTombstoneLeftBehindIsCleared(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memstore.New()
	const key = "jobs/j2.json"
	failDelete := &failingDelete{Store: s}
	pv, _ := s.Put(ctx, key, []byte("{poison"), storage.Condition{})
	qkey, err := records.Quarantine(ctx, storage.New(failDelete), &lifecycle.QuarantinedError{Key: key, Version: string(pv), Data: []byte("{poison"), Reason: "test"}, time.Now().Add(-time.Hour))
	if err == nil {
		t.Fatal("the delete failed, yet Quarantine reported success")
	}
	tb, _, err := s.Get(ctx, key)
	if err != nil || !strings.Contains(string(tb), "conveyor_quarantined") {
		t.Fatalf("want the tombstone at the key: %q, %v", tb, err)
	}
	// Restore clears an old tombstone and puts the record back.
	if err := records.Restore(ctx, s, qkey, []byte(`{"job_id":"j2"}`)); err != nil {
		t.Fatal(err)
	}
	if b, _, _ := s.Get(ctx, key); string(b) != `{"job_id":"j2"}` {
		t.Fatalf("after Restore: %q", b)
	}
	// The tombstone read as a poison record is cleared by Quarantine.
	_, _ = s.Put(ctx, key, tb, storage.Condition{})
	_, tv, _ := s.Get(ctx, key)
	got, err := records.Quarantine(ctx, s, &lifecycle.QuarantinedError{Key: key, Version: string(tv), Data: tb, Reason: "test"}, time.Now())
	if err != nil || got != qkey {
		t.Fatalf("Quarantine of the tombstone: %q, %v; want %q", got, err, qkey)
	}
	if _, _, err := s.Get(ctx, key); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("tombstone not cleared: %v", err)
	}
	for q, err := range records.ListQuarantine(ctx, s) {
		if err != nil || q.QKey != qkey {
			t.Fatalf("quarantine holds %q (%v); the tombstone must not be quarantined itself", q.QKey, err)
		}
	}
}

type failingDelete struct{ driver.Store }

func (failingDelete) Delete(context.Context, string, storage.Condition) error {
	return errors.New("connection reset")
}

// TestQuarantineOfAMovedRecordMovesNothing: the error of a record already in
// quarantine (its QKey set) is the same type as a poison read's; quarantining
// it again answers its QKey and leaves the store as it is (a record repaired
// at the key since is not touched).
func TestQuarantineOfAMovedRecordMovesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	if _, err := s.Put(ctx, "jobs/j.json", []byte(`{"repaired":true}`), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	qe := &lifecycle.QuarantinedError{ID: "j", Key: "jobs/j.json", QKey: "quarantine/jobs/j.json/v-1.json", Reason: "cannot decode"}
	qkey, err := records.Quarantine(ctx, s, qe, time.Now())
	if err != nil || qkey != qe.QKey {
		t.Fatalf("Quarantine of a moved record: %q, %v; want its QKey", qkey, err)
	}
	if b, _, err := s.Get(ctx, "jobs/j.json"); err != nil || string(b) != `{"repaired":true}` {
		t.Fatalf("the record at the key: %s, %v; want it untouched", b, err)
	}
	for k, err := range s.List(ctx, records.QuarantinePrefix) {
		t.Errorf("quarantine holds %s (%v); want nothing written", k, err)
	}
}
