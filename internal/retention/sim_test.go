package retention_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// reports collects the janitors' passes (Config.Metrics).
type reports struct {
	mu   sync.Mutex
	list []retention.Report
}

func (m *reports) RetentionPass(r retention.Report) {
	m.mu.Lock()
	m.list = append(m.list, r)
	m.mu.Unlock()
}

// TestSixtyDays runs 60 simulated days of history (runs, jobs, NLM jobs,
// expired inbox entries, idempotency records, audit events, every two
// hours) on one store with three processes running the janitor, one of
// which is killed mid-pass on day 20. Every simulated midnight: nothing
// within its retention age is lost, nothing past it (by more than a
// pass's interval and a lapsed lease) is left, and from the day the
// longest age has passed the store's keys and bytes stop growing.
func TestSixtyDays(t *testing.T) {
	t.Parallel()
	const days = 60
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	mem := memstore.New()
	m := &reports{}
	base := retention.Config{
		Clock: clk, Age: age, Interval: 6 * time.Hour, Check: 30 * time.Minute, LeaseTTL: 10 * time.Minute, Page: 50,
		Ages:    map[retention.Kind]time.Duration{retention.DeadJobs: 14 * day, retention.Artifacts: 10 * day},
		Metrics: m, Logger: quiet,
	}
	longest := 14 * day
	slack := base.Interval + 2*base.Check + base.LeaseTTL
	h := &history{t: t, store: mem, cfg: base}

	killer := &killStore{Store: mem}
	var killCtx context.Context
	var kill context.CancelFunc
	for i, owner := range []string{"p1", "p2", "p3"} {
		cfg := base
		cfg.Owner, cfg.Store = owner, mem
		jctx := ctx
		if i == 2 {
			cfg.Store = storage.New(killer)
			killCtx, kill = context.WithCancel(ctx)
			defer kill()
			jctx = killCtx
		}
		stop := newJanitor(t, cfg).Start(jctx)
		defer stop()
	}

	h.run("alpha", time.Time{}, "", "running") // never finishes: kept throughout
	nextGen := start
	var sizes [][2]int
	armed := false
	for day := 0; day < days; {
		if err := clk.WaitIdle(ctx); err != nil {
			t.Fatal(err)
		}
		now := clk.Now()
		for !nextGen.After(now) {
			at := nextGen
			agent := []string{"alpha", "beta"}[h.n%2]
			h.run(agent, at, "", []string{"completed", "failed"}[h.n%2])
			h.job(lifecycle.JobComplete, at)
			h.nlmJob(lifecycle.NLMDone, at)
			h.expiredEntry(at)
			h.idempotency(idemrecord.Completed, at.Add(24*time.Hour))
			h.audit(at)
			h.audit(at.Add(time.Minute))
			if at.Hour() == 0 {
				h.job(lifecycle.JobDead, at)
				h.artifact(at)
			}
			nextGen = nextGen.Add(2 * time.Hour)
		}
		if now.Sub(start) >= time.Duration(day+1)*day0 {
			day++
			if lost, stale := h.check(now, slack); lost+stale > 0 {
				t.Fatalf("day %d: lost %d, stale %d", day, lost, stale)
			}
			k, b := size(t, mem)
			sizes = append(sizes, [2]int{k, b})
			if day == 20 && !armed {
				armed = true
				killer.arm(3, kill)
			}
		}
		if _, ok, err := clk.AdvanceToNext(ctx); err != nil || !ok {
			t.Fatalf("AdvanceToNext: %v, %v", ok, err)
		}
	}
	if killCtx.Err() == nil {
		t.Fatal("the third janitor was never killed mid-pass")
	}
	// From the day the longest age has passed, the store holds a window of
	// history: what a pass leaves varies with the hour passes fall at (a
	// pass resumed after the kill shifts them, and an audit day goes at
	// once), but the last days never hold more than the first ten of the
	// window did, nor 10% more than its first day.
	steady := int(longest/day0) + 2
	k0, b0 := sizes[steady-1][0], sizes[steady-1][1]
	var kMax, bMax int
	for d := steady - 1; d < steady+9; d++ {
		kMax, bMax = max(kMax, sizes[d][0]), max(bMax, sizes[d][1])
	}
	for d := steady + 9; d < len(sizes); d++ {
		k, b := sizes[d][0], sizes[d][1]
		if k > kMax || b > bMax || float64(k) > 1.1*float64(k0) || float64(b) > 1.1*float64(b0) {
			t.Errorf("day %d: %d keys, %d bytes; days %d-%d: at most %d keys, %d bytes: still growing", d+1, k, b, steady, steady+9, kMax, bMax)
		}
	}
	written := 0
	for _, w := range h.recs {
		written += len(w.keys)
	}
	t.Logf("%d keys written in %d days; %d keys, %d bytes kept at day %d and %d keys, %d bytes at day %d",
		written, days, k0, b0, steady, sizes[days-1][0], sizes[days-1][1], days)

	m.mu.Lock()
	defer m.mu.Unlock()
	var killed, resumed bool
	done := 0
	for _, r := range m.list {
		if r.Owner == "p3" && r.Err != "" {
			killed = true
		}
		if killed && r.Owner != "p3" && r.Resumed {
			resumed = true
		}
		if r.Done {
			done++
		}
	}
	if !killed || !resumed {
		t.Errorf("killed pass reported %v, resumed by another %v", killed, resumed)
	}
	// One pass per interval across the three processes, not three.
	if want := int(days * day0 / base.Interval); done < want-1 || done > want+1 {
		t.Errorf("%d passes done in %d days, want about %d", done, days, want)
	}
}

const day0 = 24 * time.Hour
