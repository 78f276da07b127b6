package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// The history indexes (docs/design.md#listing-and-indexes): every run has an entry in its agent's history, written once
// when it is created, and one in its agent's list of runs in its status,
// which the status writer moves when the status changes: the record is
// written first, then the new entry, then the old one deleted. A crash
// between leaves the run's active entry in place (cleanup deletes it only
// after a terminal write's move), so the run is looked at again: a
// terminal run by the poll, which repairs its entries before it cleans up,
// a run not yet terminal by the index repair pass. Readers check every
// entry against its record and skip one that does not match.

// RunQuery selects a page of runs for ListRuns.
type RunQuery struct {
	// Agent is the agent whose runs are listed; "" lists the runs of every
	// agent of this runner.
	Agent string
	// Status keeps only the runs in this state; "" keeps every run.
	Status string
	// Limit is the most runs in the page: 0 means codes.DefaultPageLimit,
	// and more than codes.MaxPageLimit is refused.
	Limit int
	// Cursor is the Next of the page before; "" for the first page.
	Cursor string
}

// RunPage is a page of runs, newest (by started_at) first.
type RunPage struct {
	Runs []Status
	// Next is the cursor of the next page, "" on the last page.
	Next string
}

// ListRuns reads a page of runs newest first (GET /runs), through the
// history indexes: its cost is the page (a List and a read per run), not
// the history. A bad limit, cursor, status or agent is a *RequestError or
// an error whose code (lifecycle.ErrorCode) is INVALID_REQUEST, or
// INVALID_CURSOR for the cursor.
func (r *Runner) ListRuns(ctx context.Context, q RunQuery) (RunPage, error) {
	limit, err := core.PageLimit(q.Limit)
	if err != nil {
		return RunPage{}, err
	}
	after, err := core.PageCursor(q.Cursor, func(e string) bool { _, _, ok := layout.ParseNewestFirst(e); return ok })
	if err != nil {
		return RunPage{}, err
	}
	if q.Status != "" && !r.knownStatus(q.Status) {
		return RunPage{}, &RequestError{Field: "status", Reason: fmt.Sprintf("%q is not a state of any run machine", q.Status)}
	}
	slugs := []string{q.Agent}
	if q.Agent == "" {
		slugs = r.slugs()
	}
	prefixes := make([]string, len(slugs))
	for i, s := range slugs {
		if q.Status == "" {
			prefixes[i], err = layout.RunHistoryAgentPrefix(s)
		} else {
			prefixes[i], err = layout.RunStatusIndexAgentPrefix(s, q.Status)
		}
		if err != nil {
			return RunPage{}, &RequestError{Field: "agent", Reason: err.Error()}
		}
	}
	runs, next, err := core.ReadPage(ctx, r.store, prefixes, after, limit, 0, func(ctx context.Context, i int, entry string) (Status, bool, error) {
		_, runID, ok := layout.ParseNewestFirst(entry)
		if !ok {
			return Status{}, false, nil // not an entry of ours
		}
		doc, ok, err := r.readListed(ctx, slugs[i], runID)
		if !ok || err != nil {
			return Status{}, false, err
		}
		r.markLost(&doc)
		return doc, q.Status == "" || doc.Status == q.Status, nil
	})
	if err != nil {
		return RunPage{}, err
	}
	return RunPage{Runs: runs, Next: next}, nil
}

// slugs are this runner's agents, sorted.
func (r *Runner) slugs() []string {
	out := make([]string, 0, len(r.agents))
	for s := range r.agents {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// knownStatus tells whether s is a state of a run machine.
func (r *Runner) knownStatus(s string) bool {
	for _, m := range []string{lifecycle.MachineCanonical, lifecycle.MachineCancelable, lifecycle.MachineApproval} {
		if f, ok := flowFor(m); ok && f.isState(s) {
			return true
		}
	}
	return false
}

// indexCreated writes a new run's history entry and its entry under its
// first status (create-only: writing them again is a no-op).
func (r *Runner) indexCreated(ctx context.Context, doc *Status) error {
	hist, err := layout.RunHistoryKey(doc.AgentSlug, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	st, err := layout.RunStatusIndexKey(doc.AgentSlug, doc.Status, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	if err := r.putOnce(ctx, hist, nil); err != nil {
		return err
	}
	return r.putOnce(ctx, st, nil)
}

// moveStatusIndex moves a run's status entry from the status from to its
// status now, after the write that moved it. A failure is logged and noted
// as an index gap: the write has happened, the gap keeps the run's active
// entry (cleanup), and the poll's repair finds the run by it.
func (r *Runner) moveStatusIndex(ctx context.Context, doc *Status, from string) {
	if from == doc.Status {
		return
	}
	err := r.putStatusEntry(ctx, doc)
	if err == nil {
		var old string
		if old, err = layout.RunStatusIndexKey(doc.AgentSlug, from, doc.StartedAt, doc.RunID); err == nil {
			err = r.store.Delete(ctx, old, storage.Condition{})
		}
	}
	r.noteIndexGap(doc.RunID, err != nil)
	if err != nil && ctx.Err() == nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "run_index_move_failed", slog.String("runId", doc.RunID), slog.String("error", err.Error()))
	}
}

// noteIndexGap notes whether a run's status index entry is known not to
// match its status (gap) or was just made to.
func (r *Runner) noteIndexGap(runID string, gap bool) {
	r.auditMu.Lock()
	defer r.auditMu.Unlock()
	if gap {
		r.indexGaps[runID] = true
	} else {
		delete(r.indexGaps, runID)
	}
}

// indexGap tells whether a run's status index entry is known not to match.
func (r *Runner) indexGap(runID string) bool {
	r.auditMu.Lock()
	defer r.auditMu.Unlock()
	return r.indexGaps[runID]
}

// putStatusEntry writes a run's entry under its status now.
func (r *Runner) putStatusEntry(ctx context.Context, doc *Status) error {
	key, err := layout.RunStatusIndexKey(doc.AgentSlug, doc.Status, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	return r.putOnce(ctx, key, nil)
}

// repairRunIndex makes a run's entries match doc, read from the store:
// its history entry and its entry under its status exist, and none under
// another state of its machine is left. It is called for a run in the
// active index (bounded by the runs not yet cleaned up).
func (r *Runner) repairRunIndex(ctx context.Context, doc *Status) error {
	if err := r.indexCreated(ctx, doc); err != nil { // its history and status entries
		return err
	}
	for _, s := range r.flowOfDoc(doc).states {
		if s == doc.Status {
			continue
		}
		key, err := layout.RunStatusIndexKey(doc.AgentSlug, s, doc.StartedAt, doc.RunID)
		if err != nil {
			return err
		}
		if err := r.store.Delete(ctx, key, storage.Condition{}); err != nil {
			return err
		}
	}
	return nil
}

// repairIndexes is the index repair pass, every IndexRepairInterval: for
// each run in the active index, its entry under its status is put back if
// missing; for each agent and each state that is not terminal, an entry
// whose run is in another state is deleted (and put back should the run
// have moved into that state meanwhile). Its cost is the active runs and
// the entries left stale by a crash, never the history: an entry under a
// terminal state is never stale, as a terminal run does not move and its
// active entry is cleaned up only after its entries are repaired.
func (r *Runner) repairIndexes(ctx context.Context) {
	for key, err := range r.store.List(ctx, layout.RunActivePrefix) {
		if err != nil {
			r.repairFailed(ctx, err)
			return
		}
		slug, runID, ok := layout.ParseRunActiveKey(key)
		if !ok {
			continue
		}
		if _, known := r.agents[slug]; !known {
			continue
		}
		statusKey, err := layout.RunStatusKey(slug, runID)
		if err != nil {
			continue
		}
		doc, _, err := r.readStatus(ctx, slug, runID, statusKey)
		if err != nil {
			continue // not written yet (finishSubmit), or poison
		}
		if err := r.ensureEntries(ctx, &doc); err != nil {
			r.repairFailed(ctx, err)
			return
		}
	}
	for _, slug := range r.slugs() {
		f := r.agents[slug].flow
		for _, s := range f.states {
			if f.terminal(s) {
				continue
			}
			if err := r.dropStale(ctx, slug, s); err != nil {
				r.repairFailed(ctx, err)
				return
			}
		}
	}
}

// ensureEntries puts back a run's history entry and its entry under its
// status where missing, reading first: a repair pass mostly finds them.
func (r *Runner) ensureEntries(ctx context.Context, doc *Status) error {
	hist, err := layout.RunHistoryKey(doc.AgentSlug, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	st, err := layout.RunStatusIndexKey(doc.AgentSlug, doc.Status, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	for _, key := range []string{hist, st} {
		_, _, err := r.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			err = r.putOnce(ctx, key, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// dropStale deletes the entries under slug's status s whose run is in
// another state.
func (r *Runner) dropStale(ctx context.Context, slug, s string) error {
	prefix, err := layout.RunStatusIndexAgentPrefix(slug, s)
	if err != nil {
		return err
	}
	for key, err := range r.store.List(ctx, prefix) {
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
		doc, _, err := r.readStatus(ctx, slug, runID, statusKey)
		if errors.Is(err, storage.ErrNotFound) && !errors.Is(err, records.ErrCorrupt) {
			continue // its submit may still be writing the status
		}
		if err != nil || doc.Status == s {
			continue
		}
		if err := r.store.Delete(ctx, key, storage.Condition{}); err != nil {
			return err
		}
		// The run may have moved back into s after the read (running ->
		// awaiting_approval -> running) and its writer put this entry
		// again just before the delete: read once more and restore it.
		if again, _, err := r.readStatus(ctx, slug, runID, statusKey); err == nil && again.Status == s {
			if err := r.putOnce(ctx, key, nil); err != nil {
				return err
			}
		}
		r.log.LogAttrs(ctx, slog.LevelDebug, "run_index_repaired", slog.String("runId", runID), slog.String("stale", s))
	}
	return nil
}

func (r *Runner) repairFailed(ctx context.Context, err error) {
	if ctx.Err() == nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "run_index_repair_failed", slog.String("error", err.Error()))
	}
}

// maybeRepairIndexes runs the repair pass when IndexRepairInterval has
// passed since the last one, the first an interval after the loop
// started (a start-up poll costs what it did). The first pass also starts
// the backfill of the runs written before the indexes, beside the loop:
// a long listing must not hold up the work.
func (r *Runner) maybeRepairIndexes(ctx context.Context, now time.Time) {
	if r.repairedAt.IsZero() {
		r.repairedAt = now
		return
	}
	if now.Sub(r.repairedAt) < r.cfg.IndexRepairInterval && !now.Before(r.repairedAt) {
		return
	}
	r.repairedAt = now
	if !r.backfillStarted {
		r.backfillStarted = true
		// Its own token of the clock: a test's fake clock moves only
		// while it waits too.
		bctx := clock.Start(r.lifeCtx(), r.cfg.Clock)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			bctx, end := clock.Enter(bctx, r.cfg.Clock)
			defer end()
			r.backfill(bctx)
		}()
	}
	r.repairIndexes(ctx)
}

// backfill indexes, once per agent, the runs written before the history
// indexes existed: it lists the agent's run folders (the one full listing,
// then never again: a marker records it) and writes each run's entries.
// A run that moves meanwhile may leave a stale entry under a state that is
// not terminal, which the repair pass deletes.
func (r *Runner) backfill(ctx context.Context) {
	for _, slug := range r.slugs() {
		marker, err := layout.RunBackfillKey(slug)
		if err != nil {
			continue
		}
		if _, _, err := r.store.Get(ctx, marker); err == nil {
			continue
		} else if !errors.Is(err, storage.ErrNotFound) {
			r.backfillFailed(ctx, slug, err)
			return
		}
		prefix, err := layout.AgentRunsPrefix(slug)
		if err != nil {
			continue
		}
		n := 0
		for key, err := range r.store.List(ctx, prefix) {
			if err != nil {
				r.backfillFailed(ctx, slug, err)
				return
			}
			_, runID, ok := layout.ParseRunStatusKey(key)
			if !ok {
				continue
			}
			doc, _, err := r.readStatus(ctx, slug, runID, key)
			if err != nil {
				continue // gone, or poison (quarantined)
			}
			if err := r.indexCreated(ctx, &doc); err != nil {
				r.backfillFailed(ctx, slug, err)
				return
			}
			n++
		}
		if err := r.putOnce(ctx, marker, []byte("{}")); err != nil {
			r.backfillFailed(ctx, slug, err)
			return
		}
		r.log.LogAttrs(ctx, slog.LevelInfo, "run_index_backfilled", slog.String("agent", slug), slog.Int("runs", n))
	}
}

func (r *Runner) backfillFailed(ctx context.Context, slug string, err error) {
	if ctx.Err() == nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "run_index_backfill_failed", slog.String("agent", slug), slog.String("error", err.Error()))
	}
}

// RunningByHeartbeat returns the runs being executed (running, and
// cancel_requested on the cancel-aware machine) of this runner's agents,
// the oldest last_heartbeat_at first, at most limit (0: every one): the
// orphan query (docs/spec.md, "Recovery"). It reads the agents' status index
// entries of those states, which hold the executing runs only, and sorts
// them by heartbeat in memory: its cost is the runs executing (bounded by
// the agents' slots), never the history, and it adds no index key that a
// heartbeat would have to move (docs/design.md#listing-and-indexes). A run whose lease has lapsed (Lease.ExpiresAt passed) has
// lost its runner; the next poll of any runner takes it over.
func (r *Runner) RunningByHeartbeat(ctx context.Context, limit int) ([]Status, error) {
	var out []Status
	for _, slug := range r.slugs() {
		f := r.agents[slug].flow
		for _, s := range f.states {
			if !f.executing(s) {
				continue
			}
			prefix, err := layout.RunStatusIndexAgentPrefix(slug, s)
			if err != nil {
				return nil, err
			}
			for key, err := range r.store.List(ctx, prefix) {
				if err != nil {
					return nil, err
				}
				_, runID, ok := layout.ParseNewestFirst(key[len(prefix):])
				if !ok {
					continue
				}
				doc, ok, err := r.readListed(ctx, slug, runID)
				if err != nil {
					return nil, err
				}
				if ok && doc.Status == s {
					r.markLost(&doc)
					out = append(out, doc)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Status) int {
		return derefTime(a.LastHeartbeatAt).Compare(derefTime(b.LastHeartbeatAt))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
