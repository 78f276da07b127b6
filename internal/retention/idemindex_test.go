package retention_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// recordReads counts the reads of idempotency records.
type recordReads struct {
	driver.Store
	n atomic.Int64
}

func (c *recordReads) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if layout.IsIdempotencyKey(key) {
		c.n.Add(1)
	}
	return c.Store.Get(ctx, key)
}

// idemOnly is a janitor config that deletes idempotency records alone.
func idemOnly(s *storage.Store, clk clock.Clock) retention.Config {
	return retention.Config{Store: s, Owner: "p1", Clock: clk, Logger: quiet,
		Ages: map[retention.Kind]time.Duration{retention.Idempotency: 0}}
}

// putRecord writes a completed record of key expiring at expires and, when
// entry is set, its expiry entry under the hour of filed, as a submit does.
func putRecord(t *testing.T, s *storage.Store, key string, expires time.Time, entry bool, filed time.Time) string {
	t.Helper()
	rk := layout.IdempotencyKey(key)
	rec := idemrecord.Record{Key: key, Source: "api", Status: idemrecord.Completed, RunID: "run_x",
		CreatedAt: expires.Add(-24 * time.Hour), UpdatedAt: expires.Add(-24 * time.Hour), ExpiresAt: expires}
	putJSON(t, s, rk, &rec, storage.Condition{})
	if entry {
		ek, _ := layout.IdempotencyExpiryKey(rk, filed)
		if _, err := s.Put(context.Background(), ek, []byte("{}"), storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	return rk
}

func putJSON(t *testing.T, s *storage.Store, key string, doc any, cond storage.Condition) {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), key, b, cond); err != nil {
		t.Fatal(err)
	}
}

// setClock moves the fake clock to at.
func setClock(clk *clock.Fake, at time.Time) { clk.Advance(at.Sub(clk.Now())) }

func exists(t *testing.T, s *storage.Store, key string) bool {
	t.Helper()
	_, _, err := s.Get(context.Background(), key)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

func countPrefix(t *testing.T, s *storage.Store, prefix string) int {
	t.Helper()
	n := 0
	for _, err := range s.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// TestExpiryIndexReadsOnlyPastHours: with 1,000 live keyed records, the
// first pass (a full listing, as after an upgrade) reads every record; the
// next passes, through the expiry index, read none until some expire, and
// then only those, which they delete with their entries.
func TestExpiryIndexReadsOnlyPastHours(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	reads := &recordReads{Store: memstore.New()}
	s := storage.New(reads)
	for i := range 1000 {
		// Expiring from 2 h to 12 h from now: 100 an hour.
		exp := start.Add(2*time.Hour + time.Duration(i)*36*time.Second)
		putRecord(t, s, "api:c:"+string(rune('a'+i%26))+strings.Repeat("x", i/26)+"-"+exp.Format("150405"), exp, true, exp)
	}
	j := newJanitor(t, idemOnly(s, clk))
	pass := func() (retention.Report, int64) {
		t.Helper()
		reads.n.Store(0)
		rep, ran, err := j.Pass(context.Background())
		if err != nil || !ran {
			t.Fatalf("pass: %+v, %v, %v", rep, ran, err)
		}
		return rep, reads.n.Load()
	}
	if _, n := pass(); n != 1000 {
		t.Errorf("full listing read %d records, want 1,000", n)
	}
	setClock(clk, start.Add(time.Hour))
	if rep, n := pass(); n != 0 || rep.Deleted[retention.Idempotency] != 0 {
		t.Errorf("index pass with nothing expired read %d records (%+v), want 0", n, rep)
	}
	// 3 h in: the third hour has ended, and its 100 records expired.
	setClock(clk, start.Add(3*time.Hour))
	rep, n := pass()
	if n != 100 || rep.Deleted[retention.Idempotency] != 100 || rep.Refiled != 0 || rep.Changed != 0 {
		t.Errorf("index pass after the 24th hour: read %d, %+v; want 100 read and deleted, nothing else", n, rep)
	}
	if got := countPrefix(t, s, layout.IdempotencyPrefix); got != 900 {
		t.Errorf("%d records left, want 900", got)
	}
	if got := countPrefix(t, s, layout.IdempotencyExpiryPrefix); got != 900 {
		t.Errorf("%d entries left, want 900", got)
	}
}

// TestExpiryIndexFaults: an entry without its record, a record without its
// entry, an entry naming no record key and a record that does not decode
// neither block a pass nor are read again at every pass.
func TestExpiryIndexFaults(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	s := memstore.New()
	ctx := context.Background()
	past := start.Add(-2 * time.Hour)
	orphan, _ := layout.IdempotencyExpiryKey(layout.IdempotencyKey("api:c:gone"), past)
	junk := layout.IdempotencyExpiryHourPrefix(past) + "not-a-hash.json"
	corruptRec := layout.IdempotencyKey("api:c:corrupt")
	corruptEntry, _ := layout.IdempotencyExpiryKey(corruptRec, past)
	for _, k := range []string{orphan, junk, corruptEntry} {
		if _, err := s.Put(ctx, k, []byte("{}"), storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put(ctx, corruptRec, []byte("{not json"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	good := putRecord(t, s, "api:c:good", past, true, past)
	cfg := idemOnly(s, clk)
	// The full listing is not due: only the index is read.
	putJSON(t, s, layout.JanitorKey, &struct {
		IdemFullAt time.Time `json:"idempotency_full_at"`
	}{start.Add(-time.Hour)}, storage.Condition{})
	noEntry := putRecord(t, s, "api:c:old", past, false, past)
	rep, _, err := newJanitor(t, cfg).Pass(ctx)
	if err != nil || !rep.Done {
		t.Fatalf("pass: %+v, %v", rep, err)
	}
	if exists(t, s, good) || rep.Deleted[retention.Idempotency] != 1 {
		t.Errorf("the expired record with an entry: kept (%+v)", rep)
	}
	if exists(t, s, orphan) || exists(t, s, corruptEntry) || !exists(t, s, corruptRec) {
		t.Error("the orphan entry and the corrupt record's entry should be gone, the corrupt record left to its quarantine")
	}
	if !exists(t, s, junk) || rep.Skipped != 2 || rep.Changed != 1 {
		t.Errorf("junk entry kept and counted: skipped %d (want 2: junk, corrupt), changed %d (want 1: orphan)", rep.Skipped, rep.Changed)
	}
	if !exists(t, s, noEntry) {
		t.Error("a record without an entry was found before the full listing was due")
	}
	// A day after the last full listing, the next pass lists every record.
	setClock(clk, start.Add(retention.DefaultIdempotencyFullListing))
	if rep, _, err := newJanitor(t, cfg).Pass(ctx); err != nil || exists(t, s, noEntry) {
		t.Errorf("the full listing a day later left the record without an entry: %+v, %v", rep, err)
	}
}

// TestOldRecordsWithoutEntries: the idempotency records of the 558b656
// fixture (written before the index) are deleted by the first pass after
// the upgrade, which lists every record.
func TestOldRecordsWithoutEntries(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "testdata", "stores", "558b656", "store", "idempotency")
	files, err := os.ReadDir(dir)
	if err != nil || len(files) == 0 {
		t.Fatalf("fixture: %v (%d files)", err, len(files))
	}
	s := memstore.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(context.Background(), layout.IdempotencyPrefix+f.Name(), b, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	rep, _, err := newJanitor(t, idemOnly(s, clk)).Pass(context.Background())
	if err != nil || rep.Deleted[retention.Idempotency] != len(files) || countPrefix(t, s, layout.IdempotencyPrefix) != 0 {
		t.Errorf("first pass after the upgrade: %+v, %v; want the %d old records deleted", rep, err, len(files))
	}
}

// TestRefiledKeyStillDeduplicates submits keyed requests through the
// Runner, of the default tenant and of a named one: each record is filed
// under its expiry hour; a record whose expiry moved later is re-filed by
// the pass after its entry's hour, not deleted, and a duplicate submit is
// still answered its run; once expired, both tenants' records and entries
// are deleted.
func TestRefiledKeyStillDeduplicates(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	s := memstore.New()
	step := func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }
	r, err := run.NewRunner(run.Config{Store: s, Logger: quiet, Clock: clk},
		run.Agent{Slug: "alpha", Steps: []run.Step{{Name: "one", Run: step}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tenantCtx := lifecycle.WithTenant(ctx, "acme")
	req := lifecycle.SubmitRequest{AgentSlug: "alpha", IdempotencyKey: "api:c:1"}
	first := map[context.Context]string{}
	for _, c := range []context.Context{ctx, tenantCtx} {
		res, err := r.Submit(c, req)
		if err != nil {
			t.Fatal(err)
		}
		first[c] = res.RunID
	}
	if n := countPrefix(t, s, layout.IdempotencyExpiryHourPrefix(start.Add(24*time.Hour))); n != 2 {
		t.Fatalf("%d expiry entries under the hour of created + 24 h, want 2 (one a tenant)", n)
	}
	// Move the default tenant's expiry 3 h later, as a write of a later
	// generation would.
	rk := layout.IdempotencyKey(req.IdempotencyKey)
	rec, ver, err := records.Read[idemrecord.Record](ctx, s, rk)
	if err != nil {
		t.Fatal(err)
	}
	rec.ExpiresAt = rec.ExpiresAt.Add(3 * time.Hour)
	putJSON(t, s, rk, &rec, storage.IfMatch(ver))
	setClock(clk, start.Add(26*time.Hour)) // the entries' hour has ended
	j := newJanitor(t, idemOnly(s, clk))
	rep, _, err := j.Pass(ctx)
	if err != nil || rep.Refiled != 1 || rep.Deleted[retention.Idempotency] != 1 {
		t.Fatalf("pass: %+v, %v; want 1 re-filed, the tenant's deleted", rep, err)
	}
	if n := countPrefix(t, s, layout.IdempotencyExpiryHourPrefix(rec.ExpiresAt)); n != 1 {
		t.Errorf("%d entries under the moved expiry's hour, want 1", n)
	}
	if n := countPrefix(t, s, layout.IdempotencyExpiryPrefix); n != 1 {
		t.Errorf("%d entries in all after the re-file, want 1 (the old one deleted)", n)
	}
	setClock(clk, start.Add(26*time.Hour+time.Minute))
	if res, err := r.Submit(ctx, req); err != nil || !res.Duplicate || res.RunID != first[ctx] {
		t.Errorf("duplicate after the re-file: %+v, %v; want run %s", res, err, first[ctx])
	}
	setClock(clk, rec.ExpiresAt.Add(2*time.Hour))
	rep, _, err = j.Pass(ctx)
	if err != nil || rep.Deleted[retention.Idempotency] != 1 || countPrefix(t, s, layout.IdempotencyPrefix) != 0 || countPrefix(t, s, layout.IdempotencyExpiryPrefix) != 0 {
		t.Errorf("pass after the moved expiry: %+v, %v; want the record and its entry gone", rep, err)
	}
}
