package retention_test

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

var quiet = slog.New(slog.DiscardHandler)

func stores(t *testing.T) map[string]func(t *testing.T) *storage.Store {
	return map[string]func(t *testing.T) *storage.Store{
		"memstore": func(*testing.T) *storage.Store { return memstore.New() },
		"filestore": func(t *testing.T) *storage.Store {
			s, err := filestore.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

func newJanitor(t *testing.T, cfg retention.Config) *retention.Janitor {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	j, err := retention.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestPassDeletesWhatIsPastItsAge writes every kind, finished and not,
// before and within its age, and checks one pass deletes exactly what is
// past it, leaving nothing of a deleted run behind.
func TestPassDeletesWhatIsPastItsAge(t *testing.T) {
	t.Parallel()
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := mk(t)
			clk := clock.NewFake(t0)
			cfg := retention.Config{Store: s, Owner: "p1", Clock: clk, Age: age, Page: 7,
				Ages: map[retention.Kind]time.Duration{retention.Artifacts: 30 * day}}
			h := &history{t: t, store: s, cfg: cfg}
			old, recent := t0.Add(-age-time.Hour), t0.Add(-age+time.Hour)
			for _, end := range []time.Time{old, recent} {
				h.run("alpha", end, "", "completed")
				h.run("beta", end, lifecycle.MachineCancelable, "canceled")
				h.run("beta", end, lifecycle.MachineApproval, "awaiting_approval")
				h.job(lifecycle.JobComplete, end)
				h.job(lifecycle.JobDead, end)
				h.job(lifecycle.JobRetryBackoff, end)
				h.nlmJob(lifecycle.NLMDone, end)
				h.nlmJob(lifecycle.NLMQuery, end)
				h.expiredEntry(end)
				h.audit(end.Add(-24 * time.Hour))
				h.artifact(end)
			}
			h.run("alpha", time.Time{}, "", "running")
			h.idempotency(idemrecord.Completed, t0.Add(-time.Second))
			h.idempotency(idemrecord.Failed, t0.Add(time.Second))
			h.marker(t0.Add(-time.Second))
			h.marker(t0.Add(time.Second))
			// Not records of any kind: left alone.
			for _, k := range []string{"agents/alpha/slots/0.json", "queue/lanes/a/x", "index/runs/zzz.json", "schedules/s.json"} {
				h.put(k, map[string]int{})
			}

			r, ran, err := newJanitor(t, cfg).Pass(ctx)
			if err != nil || !ran || !r.Done {
				t.Fatalf("Pass = %+v, %v, %v", r, ran, err)
			}
			if lost, stale := h.check(t0, 0); lost+stale > 0 {
				t.Fatalf("lost %d, stale %d", lost, stale)
			}
			want := map[retention.Kind]int{retention.Runs: 2, retention.Jobs: 2, retention.Inbox: 1, retention.Idempotency: 2, retention.Audit: 2}
			for k, n := range want {
				if r.Deleted[k] != n {
					t.Errorf("deleted %d %s, want %d (report %+v)", r.Deleted[k], k, n, r)
				}
			}
			// The next pass is not due before Interval.
			if _, ran, _ := newJanitor(t, cfg).Pass(ctx); ran {
				t.Error("a second pass ran before Interval")
			}
		})
	}
}

// racer rewrites key between the janitor's read and its delete.
type racer struct {
	driver.Store
	key  string
	done bool
}

func (s *racer) Delete(ctx context.Context, key string, c storage.Condition) error {
	if key == s.key && !s.done {
		s.done = true
		b, _, err := s.Store.Get(ctx, key)
		if err != nil {
			return err
		}
		if _, err := s.Store.Put(ctx, key, b, storage.Condition{}); err != nil {
			return err
		}
	}
	return s.Store.Delete(ctx, key, c)
}

// TestChangedRecordIsKept: a record written after the janitor read it is
// not deleted (the delete is conditional on the version judged). Without
// the condition the test fails: the rewritten record is gone.
func TestChangedRecordIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, kind := range []retention.Kind{retention.Jobs, retention.Runs} {
		mem := memstore.New()
		cfg := retention.Config{Owner: "p1", Clock: clock.NewFake(t0), Age: age}
		h := &history{t: t, store: mem, cfg: cfg}
		key := must(layout.JobKey(h.job(lifecycle.JobComplete, t0.Add(-age-time.Hour))))
		if kind == retention.Runs {
			key = must(layout.RunStatusKey("alpha", h.run("alpha", t0.Add(-age-time.Hour), "", "completed")))
		}
		cfg.Store = storage.New(&racer{Store: mem, key: key})
		r, _, err := newJanitor(t, cfg).Pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := mem.Get(ctx, key); err != nil {
			t.Errorf("%s rewritten after the janitor's read was deleted: %v", key, err)
		}
		if r.Changed != 1 {
			t.Errorf("report counts %d changed records, want 1: %+v", r.Changed, r)
		}
	}
}

// TestOnePassAcrossJanitors: of janitors sharing a store, one makes the
// due pass; the others find it taken, then not due.
func TestOnePassAcrossJanitors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	var js []*retention.Janitor
	for _, o := range []string{"p1", "p2", "p3"} {
		js = append(js, newJanitor(t, retention.Config{Store: s, Owner: o, Clock: clk, Age: age, Interval: time.Hour}))
	}
	for round := range 3 {
		passes := 0
		for _, j := range js {
			_, ran, err := j.Pass(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ran {
				passes++
			}
		}
		if passes != 1 {
			t.Errorf("round %d: %d passes, want 1", round, passes)
		}
		clk.Advance(time.Hour)
	}
}

// TestKilledPassIsResumed: a janitor that dies mid-pass holds the lease
// until it lapses; then another takes it and goes on from the recorded
// cursor, and everything eligible is deleted in the end.
func TestKilledPassIsResumed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := memstore.New()
	clk := clock.NewFake(t0)
	cfg := retention.Config{Owner: "p1", Clock: clk, Age: age, Page: 5, LeaseTTL: time.Minute}
	h := &history{t: t, store: mem, cfg: cfg}
	for i := range 30 {
		h.run("alpha", t0.Add(-age-time.Duration(i)*time.Minute), "", "completed")
		h.job(lifecycle.JobComplete, t0.Add(-age-time.Hour))
	}
	ks := &killStore{Store: mem}
	ks.arm(40, func() {})
	cfg.Store = storage.New(ks)
	r1, ran, err := newJanitor(t, cfg).Pass(ctx)
	if !ran || err == nil || r1.Done {
		t.Fatalf("killed pass = %+v, %v, %v", r1, ran, err)
	}
	cfg2 := cfg
	cfg2.Store, cfg2.Owner = mem, "p2"
	j2 := newJanitor(t, cfg2)
	if _, ran, _ := j2.Pass(ctx); ran {
		t.Fatal("p2 took a live lease")
	}
	clk.Advance(time.Minute)
	r2, ran, err := j2.Pass(ctx)
	if !ran || err != nil || !r2.Done || !r2.Resumed || r2.Epoch != r1.Epoch+1 {
		t.Fatalf("resumed pass = %+v, %v, %v", r2, ran, err)
	}
	if lost, stale := h.check(clk.Now(), 0); lost+stale > 0 {
		t.Fatalf("lost %d, stale %d", lost, stale)
	}
	// The dead janitor, back, cannot write: its lease is gone.
	ks.mu.Lock()
	ks.dead, ks.armed = false, false
	ks.mu.Unlock()
	if _, ran, _ := newJanitor(t, cfg).Pass(ctx); ran {
		t.Error("p1 made a pass that is not due")
	}
}

// TestCorruptLeaseIsQuarantined: a lease record that does not decode
// blocks nothing.
func TestCorruptLeaseIsQuarantined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	if _, err := s.Put(ctx, layout.JanitorKey, []byte("{not json"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	_, ran, err := newJanitor(t, retention.Config{Store: s, Owner: "p1", Clock: clock.NewFake(t0), Age: age}).Pass(ctx)
	if !ran || err != nil {
		t.Fatalf("Pass: ran %v, %v", ran, err)
	}
	n := 0
	for q, err := range records.ListQuarantine(ctx, s) {
		if err != nil {
			t.Fatal(err)
		}
		if q.Key == layout.JanitorKey {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d quarantined lease records, want 1", n)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	for _, cfg := range []retention.Config{
		{Owner: "p1"},
		{Store: s},
		{Store: s, Owner: "../x"},
		{Store: s, Owner: "p1", Age: -time.Hour},
		{Store: s, Owner: "p1", Ages: map[retention.Kind]time.Duration{"nope": time.Hour}},
		{Store: s, Owner: "p1", Ages: map[retention.Kind]time.Duration{retention.Runs: -2}},
	} {
		if _, err := retention.New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}

// TestOffDeletesNothing: the zero Config is off.
func TestOffDeletesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	h := &history{t: t, store: s}
	h.job(lifecycle.JobComplete, t0.Add(-365*day))
	j := newJanitor(t, retention.Config{Store: s, Owner: "p1", Clock: clock.NewFake(t0)})
	if _, ran, err := j.Pass(ctx); ran || err != nil {
		t.Fatalf("Pass ran %v, %v", ran, err)
	}
	if err := j.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := size(t, s); n != 1 {
		t.Errorf("%d keys, want 1", n)
	}
}

// TestAuditListsWhatItDeletes: audit days list in date order, so a pass
// stops at the first day within its age: it lists what it deletes (and at
// most a page more), not the whole log. Without the early stop it lists
// all 300 events.
func TestAuditListsWhatItDeletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	cfg := retention.Config{Store: s, Owner: "p1", Clock: clock.NewFake(t0), Page: 10,
		Ages: map[retention.Kind]time.Duration{retention.Audit: 3 * day}}
	h := &history{t: t, store: s, cfg: cfg}
	for d := range 10 {
		for i := range 30 {
			h.audit(t0.Add(-time.Duration(d)*day - time.Duration(i)*time.Minute))
		}
	}
	r, _, err := newJanitor(t, cfg).Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lost, stale := h.check(t0, 0); lost+stale > 0 {
		t.Fatalf("lost %d, stale %d", lost, stale)
	}
	n := r.Deleted[retention.Audit]
	if n == 0 || r.Listed > n+cfg.Page {
		t.Errorf("deleted %d events, listed %d keys: want at most a page (%d) more", n, r.Listed, cfg.Page)
	}
}

// TestRunWithoutStartIsDeleted: a finished run whose started_at is missing
// (no newest-first index key can be made of it) is deleted all the same.
// Before, it was skipped at every pass and kept for ever.
func TestRunWithoutStartIsDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	cfg := retention.Config{Store: s, Owner: "p1", Clock: clk, Age: age}
	h := &history{t: t, store: s, cfg: cfg}
	end := t0.Add(-age - time.Hour)
	st := lifecycle.RunStatus{RunID: "run-nostart", AgentSlug: "alpha", Status: "completed", Trigger: "manual", FinishedAt: &end}
	statusKey := must(layout.RunStatusKey("alpha", st.RunID))
	h.put(statusKey, st)
	h.put(must(layout.RunIndexKey(st.RunID)), map[string]string{"agent_slug": "alpha"})
	r, ran, err := newJanitor(t, cfg).Pass(ctx)
	if err != nil || !ran || !r.Done {
		t.Fatalf("Pass = %+v, %v, %v", r, ran, err)
	}
	for _, key := range []string{statusKey, must(layout.RunIndexKey(st.RunID))} {
		if _, _, err := s.Get(ctx, key); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("%s after the pass: %v, want not found (report %+v)", key, err, r)
		}
	}
}

// TestKilledPassLeavesNoEmptyFolder: a janitor killed between a file's
// removal and the removal of the folder it emptied (filestore prunes
// empty directories after the unlink) leaves an empty run folder; the next
// pass removes it. The pass is killed at each of its deletes in turn.
// Before the fix the empty folder stayed for ever: no key lists it, so no
// pass ever looked at it.
func TestKilledPassLeavesNoEmptyFolder(t *testing.T) {
	t.Parallel()
	const runs = 3
	// Each run takes 10 deletes: its index entries, its files, its status
	// last.
	for n := range runs * 10 {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			root := t.TempDir()
			fs, err := filestore.New(root)
			if err != nil {
				t.Fatal(err)
			}
			clk := clock.NewFake(t0)
			cfg := retention.Config{Owner: "p1", Clock: clk, Age: age, Page: 4, LeaseTTL: time.Minute}
			h := &history{t: t, store: fs, cfg: cfg}
			for i := range runs {
				h.run("alpha", t0.Add(-age-time.Duration(i+1)*time.Hour), "", "completed")
			}
			h.run("alpha", t0.Add(-time.Hour), "", "completed") // kept: its folder stays
			ks := &killStore{Store: fs, unlink: func(key string) {
				_ = os.Remove(filepath.Join(root, filepath.FromSlash(key)))
			}}
			ks.arm(n, func() {})
			cfg.Store = storage.New(ks)
			if _, ran, err := newJanitor(t, cfg).Pass(ctx); !ran || !errors.Is(err, errKilled) {
				t.Fatalf("killed pass: ran %v, err %v", ran, err)
			}
			clk.Advance(time.Minute)
			cfg.Store, cfg.Owner = fs, "p2"
			if r, ran, err := newJanitor(t, cfg).Pass(ctx); !ran || err != nil || !r.Done {
				t.Fatalf("next pass = %+v, %v, %v", r, ran, err)
			}
			if empty := emptyDirs(t, root); len(empty) > 0 {
				t.Errorf("empty folders left: %v", empty)
			}
			if lost, stale := h.check(clk.Now(), 0); lost+stale > 0 {
				t.Errorf("lost %d, stale %d", lost, stale)
			}
		})
	}
}

// emptyDirs lists the directories under root (root aside) that hold
// nothing.
func emptyDirs(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || p == root {
			return err
		}
		ents, err := os.ReadDir(p)
		if err == nil && len(ents) == 0 {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
