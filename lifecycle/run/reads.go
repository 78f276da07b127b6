package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// locate finds a run's agent through the run index.
func (r *Runner) locate(ctx context.Context, runID string) (slug, statusKey string, err error) {
	idx, err := layout.RunIndexKey(runID)
	if err != nil {
		return "", "", &RequestError{Field: "run_id", Reason: err.Error()}
	}
	b, v, err := r.store.Get(ctx, idx)
	if errors.Is(err, storage.ErrNotFound) {
		return "", "", fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	if err != nil {
		return "", "", err
	}
	var e runIndexEntry
	derr := json.Unmarshal(b, &e)
	if derr == nil {
		if statusKey, err = layout.RunStatusKey(e.AgentSlug, runID); err == nil {
			return e.AgentSlug, statusKey, nil
		}
		derr = err
	}
	// A poison index entry: quarantine it, and find the run among this
	// runner's agents, whose run folders hold its status.json.
	if _, err := r.quarantine(ctx, &records.CorruptError{Key: idx, Version: v, Data: b, Reason: "invalid run index entry", Err: derr}); err != nil {
		return "", "", err
	}
	return r.reindex(ctx, runID, idx)
}

// reindex finds runID's agent among this runner's agents and writes its
// index entry again (create-only: a concurrent repair wins).
func (r *Runner) reindex(ctx context.Context, runID, idx string) (slug, statusKey string, err error) {
	slugs := make([]string, 0, len(r.agents))
	for s := range r.agents {
		slugs = append(slugs, s)
	}
	slices.Sort(slugs)
	for _, s := range slugs {
		key, err := layout.RunStatusKey(s, runID)
		if err != nil {
			return "", "", err
		}
		if _, _, err := r.store.Get(ctx, key); errors.Is(err, storage.ErrNotFound) {
			continue
		} else if err != nil {
			return "", "", err
		}
		entry, _ := json.Marshal(runIndexEntry{AgentSlug: s, Machine: r.agents[s].Machine})
		if _, err := r.store.Put(ctx, idx, entry, storage.IfNotExists()); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
			return "", "", err
		}
		return s, key, nil
	}
	return "", "", fmt.Errorf("%w: %s (its index entry was poison)", ErrNotFound, runID)
}

// Status reads a run's status.json (GET /runs/{runId}/status).
//
// A status.json that cannot be decoded or fails validation (a status its
// machine does not know, a run_id or agent_slug that is not its key's) is
// quarantined, and Status, like Wait, returns a *QuarantinedError.
func (r *Runner) Status(ctx context.Context, runID string) (Status, error) {
	slug, key, err := r.locate(ctx, runID)
	if err != nil {
		return Status{}, err
	}
	doc, _, err := r.readStatus(ctx, slug, runID, key)
	if errors.Is(err, storage.ErrNotFound) {
		return Status{}, fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	r.markLost(&doc)
	return doc, err
}

// markLost sets a read's RunnerLostAt (docs/spec.md#run-status): the run is
// executing, but its lease expired by this runner's clock, so the runner
// that holds it stopped heartbeating and none has taken it over yet. It is
// the same test a claim makes before taking a run over.
func (r *Runner) markLost(d *Status) {
	d.RunnerLostAt = nil
	if d.Lease == nil || !r.now().After(d.Lease.ExpiresAt) {
		return
	}
	// The run's own machine (validated on read), whatever this runner's
	// config now gives its agent.
	if f, ok := flowFor(d.Machine); !ok || !f.executing(d.Status) {
		return
	}
	at := d.Lease.ExpiresAt
	d.RunnerLostAt = &at
}

// Steps reads a run's step files in step order (GET /runs/{runId}/steps).
func (r *Runner) Steps(ctx context.Context, runID string) ([]StepRecord, error) {
	slug, _, err := r.locate(ctx, runID)
	if err != nil {
		return nil, err
	}
	return r.readSteps(ctx, slug, runID)
}

func (r *Runner) readSteps(ctx context.Context, slug, runID string) ([]StepRecord, error) {
	prefix, err := layout.RunStepsPrefix(slug, runID)
	if err != nil {
		return nil, err
	}
	var out []StepRecord
	for key, err := range r.store.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		b, _, err := r.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var s StepRecord
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("run: step file %s: %w", key, err)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StepNumber < out[j].StepNumber })
	return out, nil
}

// Runs reads the status of every run of an agent, oldest first, by
// listing its run folders: its cost is the agent's history. ListRuns reads
// a page from the indexes (GET /runs).
func (r *Runner) Runs(ctx context.Context, slug string) ([]Status, error) {
	prefix, err := layout.AgentRunsPrefix(slug)
	if err != nil {
		return nil, &RequestError{Field: "agent", Reason: err.Error()}
	}
	var out []Status
	for key, err := range r.store.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		_, runID, ok := layout.ParseRunStatusKey(key)
		if !ok {
			continue
		}
		doc, _, err := r.readStatus(ctx, slug, runID, key)
		if errors.Is(err, storage.ErrNotFound) || errors.Is(err, records.ErrCorrupt) {
			continue // gone, or poison: quarantined
		}
		if err != nil {
			return nil, err
		}
		r.markLost(&doc)
		out = append(out, doc)
	}
	return out, nil
}

// ActiveRuns counts the runs not yet terminal by status, as the store holds
// them: it lists the active index and reads each run's status.json (a read
// per active run, so call it at a scrape, not per request). Every state
// that is not terminal of the machines of this runner's agents is in the
// map, 0 when no run is in it. It is what gwi_run_active_gauge exports
// (adapters/prometheus WatchRuns): read from the store, the count is right
// after a restart and with several runners sharing the store, where counts
// moved by one process's writes are not.
func (r *Runner) ActiveRuns(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	for _, a := range r.agents {
		f, _ := flowFor(a.Machine)
		for _, s := range f.states {
			if !f.terminal(s) {
				out[s] = 0
			}
		}
	}
	for key, err := range r.store.List(ctx, layout.RunActivePrefix) {
		if err != nil {
			return nil, err
		}
		slug, runID, ok := layout.ParseRunActiveKey(key)
		if !ok {
			continue
		}
		doc, ok, err := r.readListed(ctx, slug, runID)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if !r.flowOfDoc(&doc).terminal(doc.Status) {
			out[doc.Status]++
		}
	}
	return out, nil
}

// Wait returns the run's status once it is terminal or parked (waiting for
// an approval or an external event), or ctx's error. It re-reads when this
// runner writes any status and at every PollInterval.
func (r *Runner) Wait(ctx context.Context, runID string) (Status, error) {
	for {
		changed := r.changes()
		doc, err := r.Status(ctx, runID)
		if err != nil {
			return doc, err
		}
		f := r.flowOfDoc(&doc)
		if f.terminal(doc.Status) || (doc.Lease == nil && slices.Contains(f.parked, doc.Status)) {
			return doc, nil
		}
		t := r.cfg.Clock.NewTimer(r.cfg.PollInterval)
		select {
		case <-changed:
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return doc, ctx.Err()
		}
		t.Stop()
	}
}

// readListed reads the status of a run an index listing named. ok is false
// for one to pass over: an id that makes no key, a status its submit has
// not written yet, or a poison record (quarantined by the read).
func (r *Runner) readListed(ctx context.Context, slug, runID string) (doc Status, ok bool, err error) {
	statusKey, err := layout.RunStatusKey(slug, runID)
	if err != nil {
		return Status{}, false, nil
	}
	doc, _, err = r.readStatus(ctx, slug, runID, statusKey)
	switch {
	case errors.Is(err, storage.ErrNotFound) || errors.Is(err, records.ErrCorrupt):
		return Status{}, false, nil
	case err != nil:
		return Status{}, false, err
	}
	return doc, true, nil
}
