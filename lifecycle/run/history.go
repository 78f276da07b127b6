package run

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/maintenance"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// history keeps the history indexes of the runs (see below): a run's
// entries written at its creation, moved at each change of status, and
// repaired by the loop's repair pass; the backfill indexes the runs
// written before the indexes existed. It remembers the runs whose status
// entry could not be moved (gaps): a gap keeps the run's active entry, so
// the poll finds the run and repairs it.
type history struct {
	store    *storage.Store
	log      *slog.Logger
	clock    clock.Clock
	interval time.Duration // Config.IndexRepairInterval
	cat      *catalog
	statuses *statuses
	life     *lifetime

	mu   sync.Mutex
	gaps map[string]bool
	// repair drives the index repair from the loop's polls; only the loop
	// touches it.
	repair *maintenance.Ticker
}

// The history indexes (docs/design.md#listing-and-indexes): every run has an entry in its agent's history, written once
// when it is created, and one in its agent's list of runs in its status,
// which the status writer moves when the status changes: the record is
// written first, then the new entry, then the old one deleted. A crash
// between leaves the run's active entry in place (cleanup deletes it only
// after a terminal write's move), so the run is looked at again: a
// terminal run by the poll, which repairs its entries before it cleans up,
// a run not yet terminal by the index repair pass. Readers check every
// entry against its record and skip one that does not match.

// indexCreated writes a new run's history entry and its entry under its
// first status (create-only: writing them again is a no-op).
func (h *history) indexCreated(ctx context.Context, doc *lifecycle.RunStatus) error {
	hist, err := layout.TenantRunHistoryKey(doc.TenantID, doc.AgentSlug, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	st, err := layout.TenantRunStatusIndexKey(doc.TenantID, doc.AgentSlug, doc.Status, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	if err := putOnce(ctx, h.store, hist, nil); err != nil {
		return err
	}
	if err := h.indexRepo(ctx, doc); err != nil {
		return err
	}
	return putOnce(ctx, h.store, st, nil)
}

// repairRunIndex makes a run's entries match doc, read from the store:
// its history entry and its entry under its status exist, and none under
// another state of its machine is left. It is called for a run in the
// active index (bounded by the runs not yet cleaned up).
func (h *history) repairRunIndex(ctx context.Context, doc *lifecycle.RunStatus) error {
	if err := h.indexCreated(ctx, doc); err != nil { // its history and status entries
		return err
	}
	for _, s := range h.cat.flowOfDoc(doc).states {
		if s == doc.Status {
			continue
		}
		key, err := layout.TenantRunStatusIndexKey(doc.TenantID, doc.AgentSlug, s, doc.StartedAt, doc.RunID)
		if err != nil {
			return err
		}
		if err := h.store.Delete(ctx, key, storage.Condition{}); err != nil {
			return err
		}
	}
	return nil
}

// repairIndexes is the index repair pass (indexRepair): for
// each run in the active index, its entry under its status is put back if
// missing; for each agent and each state that is not terminal, an entry
// whose run is in another state is deleted (and put back should the run
// have moved into that state meanwhile). Its cost is the active runs and
// the entries left stale by a crash, never the history: an entry under a
// terminal state is never stale, as a terminal run does not move and its
// active entry is cleaned up only after its entries are repaired.
func (h *history) repairIndexes(ctx context.Context) error {
	tenants := map[string]bool{"": true}
	for key, err := range h.store.List(ctx, layout.RunActivePrefix) {
		if err != nil {
			return err
		}
		slug, runID, ok := layout.ParseRunActiveKey(key)
		if !ok {
			continue
		}
		if _, known := h.cat.agents[slug]; !known {
			continue
		}
		statusKey, err := layout.RunStatusKey(slug, runID)
		if err != nil {
			continue
		}
		doc, _, err := h.statuses.read(ctx, slug, runID, statusKey)
		if err != nil {
			continue // not written yet (finishSubmit), or poison
		}
		tenants[doc.TenantID] = true
		if err := h.ensureEntries(ctx, &doc); err != nil {
			return err
		}
	}
	// The tenants with an active run: a tenant's stale entry is left by a
	// crash of one of its runs' writers, and a reader skips it meanwhile.
	for tenant := range tenants {
		for _, slug := range h.cat.slugs() {
			f := h.cat.agents[slug].flow
			for _, s := range f.states {
				if f.terminal(s) {
					continue
				}
				if err := h.dropStale(ctx, tenant, slug, s); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ensureEntries puts back a run's history entry and its entry under its
// status where missing, reading first: a repair pass mostly finds them.
func (h *history) ensureEntries(ctx context.Context, doc *lifecycle.RunStatus) error {
	hist, err := layout.TenantRunHistoryKey(doc.TenantID, doc.AgentSlug, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	st, err := layout.TenantRunStatusIndexKey(doc.TenantID, doc.AgentSlug, doc.Status, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	for _, key := range []string{hist, st} {
		_, _, err := h.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			err = putOnce(ctx, h.store, key, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// dropStale deletes the entries under slug's status s whose run is in
// another state.
func (h *history) dropStale(ctx context.Context, tenant, slug, s string) error {
	prefix, err := layout.TenantRunStatusIndexAgentPrefix(tenant, slug, s)
	if err != nil {
		return err
	}
	for key, err := range h.store.List(ctx, prefix) {
		if err != nil {
			return err
		}
		_, runID, ok := layout.ParseNewestFirst(key[len(prefix):])
		if !ok {
			continue
		}
		statusKey, err := layout.RunStatusKey(slug, runID)
		if err != nil {
			continue
		}
		doc, _, err := h.statuses.read(ctx, slug, runID, statusKey)
		if errors.Is(err, storage.ErrNotFound) && !errors.Is(err, lifecycle.ErrCorrupt) {
			continue // its submit may still be writing the status
		}
		if err != nil || doc.Status == s {
			continue
		}
		if err := h.store.Delete(ctx, key, storage.Condition{}); err != nil {
			return err
		}
		// The run may have moved back into s after the read (running ->
		// awaiting_approval -> running) and its writer put this entry
		// again just before the delete: read once more and restore it.
		if again, _, err := h.statuses.read(ctx, slug, runID, statusKey); err == nil && again.Status == s {
			if err := putOnce(ctx, h.store, key, nil); err != nil {
				return err
			}
		}
		h.log.LogAttrs(ctx, slog.LevelDebug, "run_index_repaired", slog.String("runId", runID), slog.String("stale", s))
	}
	return nil
}

func (h *history) repairFailed(ctx context.Context, err error) {
	if ctx.Err() == nil {
		h.log.LogAttrs(ctx, slog.LevelWarn, "run_index_repair_failed", slog.String("error", err.Error()))
	}
}

// indexRepair is the index repair, a maintenance service of every runner
// (it puts right what a writer that died left, whichever process that
// was), driven by the loop's poll (maintenance.Ticker): the repair pass
// every IndexRepairInterval, the first an interval after the loop started
// (a start-up poll costs what it did), under the poll's PollTimeout. The
// first pass also starts the backfill of the runs written before the
// indexes, beside the loop: a long listing must not hold up the work.
type indexRepair struct {
	maintenance.Base
	h *history
	// backfillStarted tells whether the backfill was started; only the
	// loop touches it.
	backfillStarted bool
}

// maybeRepairIndexes makes the index repair's pass if it is due at now.
func (h *history) maybeRepairIndexes(ctx context.Context, now time.Time) {
	if h.repair == nil {
		h.repair = newIndexRepair(h)
	}
	h.repair.Tick(ctx, now)
}

func newIndexRepair(h *history) *maintenance.Ticker {
	return &maintenance.Ticker{Service: &indexRepair{h: h,
		Base: maintenance.Base{Name: "run_index_repair", Clock: h.clock, Logger: h.log, Period: h.interval, Delay: true}}}
}

// RunOnce makes one repair pass; one cut short by the poll's end is no
// failure: the next pass starts over.
func (x *indexRepair) RunOnce(ctx context.Context) error {
	h := x.h
	if !x.backfillStarted {
		x.backfillStarted = true
		// Its own token of the clock: a test's fake clock moves only
		// while it waits too.
		bctx := activity.Start(h.life.context(), h.clock)
		h.life.add()
		go func() {
			defer h.life.done()
			bctx, end := activity.Enter(bctx, h.clock)
			defer end()
			h.backfill(bctx)
		}()
	}
	return h.repairIndexes(ctx)
}

// backfill indexes, once per agent, the runs written before the history
// indexes existed: it lists the agent's run folders (the one full listing,
// then never again: a marker records it) and writes each run's entries.
// A run that moves meanwhile may leave a stale entry under a state that is
// not terminal, which the repair pass deletes.
func (h *history) backfill(ctx context.Context) {
	for _, slug := range h.cat.slugs() {
		marker, err := layout.RunBackfillKey(slug)
		if err != nil {
			continue
		}
		if _, _, err := h.store.Get(ctx, marker); err == nil {
			continue
		} else if !errors.Is(err, storage.ErrNotFound) {
			h.backfillFailed(ctx, slug, err)
			return
		}
		prefix, err := layout.AgentRunsPrefix(slug)
		if err != nil {
			continue
		}
		n := 0
		for key, err := range h.store.List(ctx, prefix) {
			if err != nil {
				h.backfillFailed(ctx, slug, err)
				return
			}
			_, runID, ok := layout.ParseRunStatusKey(key)
			if !ok {
				continue
			}
			doc, _, err := h.statuses.read(ctx, slug, runID, key)
			if err != nil {
				continue // gone, or poison (quarantined)
			}
			if err := h.indexCreated(ctx, &doc); err != nil {
				h.backfillFailed(ctx, slug, err)
				return
			}
			n++
		}
		if err := putOnce(ctx, h.store, marker, []byte("{}")); err != nil {
			h.backfillFailed(ctx, slug, err)
			return
		}
		h.log.LogAttrs(ctx, slog.LevelInfo, "run_index_backfilled", slog.String("agent", slug), slog.Int("runs", n))
	}
}

func (h *history) backfillFailed(ctx context.Context, slug string, err error) {
	if ctx.Err() == nil {
		h.log.LogAttrs(ctx, slog.LevelWarn, "run_index_backfill_failed", slog.String("agent", slug), slog.String("error", err.Error()))
	}
}

// putOnce writes value at key create-only; an existing key is left as is.
func putOnce(ctx context.Context, store *storage.Store, key string, value []byte) error {
	_, err := store.Put(ctx, key, value, storage.IfNotExists())
	if errors.Is(err, storage.ErrPreconditionFailed) {
		return nil
	}
	return err
}
