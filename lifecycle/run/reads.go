package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// reads answer what is asked of runs (Status, Steps, Wait, the lists) from
// the store, through the run index and the history indexes.
type reads struct {
	store        *storage.Store
	now          func() time.Time
	clock        clock.Clock
	pollInterval time.Duration // Config.PollInterval: Wait reads again at least this often
	cat          *catalog
	statuses     *statuses
	poison       *poison
	changes      *changes
}

// locate finds a run's agent through the run index.
func (rd *reads) locate(ctx context.Context, runID string) (slug, statusKey string, err error) {
	idx, err := layout.RunIndexKey(runID)
	if err != nil {
		return "", "", &RequestError{Field: "run_id", Reason: err.Error()}
	}
	b, v, err := rd.store.Get(ctx, idx)
	if errors.Is(err, storage.ErrNotFound) {
		return "", "", fmt.Errorf("%w: %s", lifecycle.ErrRunNotFound, runID)
	}
	if err != nil {
		return "", "", err
	}
	var e runIndexEntry
	derr := json.Unmarshal(b, &e)
	if derr == nil && !tenancy.Sees(ctx, e.TenantID) {
		// Another tenant's run answers as missing: its id does not leak.
		return "", "", fmt.Errorf("%w: %s", lifecycle.ErrRunNotFound, runID)
	}
	if derr == nil {
		if statusKey, err = layout.RunStatusKey(e.AgentSlug, runID); err == nil {
			return e.AgentSlug, statusKey, nil
		}
		derr = err
	}
	// A poison index entry: quarantine it, and find the run among this
	// runner's agents, whose run folders hold its status.json.
	if _, err := rd.poison.quarantine(ctx, &lifecycle.QuarantinedError{Key: idx, Version: string(v), Data: b, Reason: "invalid run index entry", Err: derr}); err != nil {
		return "", "", err
	}
	return rd.reindex(ctx, runID, idx)
}

// reindex finds runID's agent among this runner's agents and writes its
// index entry again (create-only: a concurrent repair wins).
func (rd *reads) reindex(ctx context.Context, runID, idx string) (slug, statusKey string, err error) {
	slugs := make([]string, 0, len(rd.cat.agents))
	for s := range rd.cat.agents {
		slugs = append(slugs, s)
	}
	slices.Sort(slugs)
	for _, s := range slugs {
		key, err := layout.RunStatusKey(s, runID)
		if err != nil {
			return "", "", err
		}
		body, _, err := rd.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		} else if err != nil {
			return "", "", err
		}
		var t struct {
			TenantID string `json:"tenant_id"`
		}
		_ = json.Unmarshal(body, &t) // a poison status is the status read's to quarantine
		if !tenancy.Sees(ctx, t.TenantID) {
			break
		}
		entry, _ := json.Marshal(runIndexEntry{AgentSlug: s, Machine: rd.cat.agents[s].Machine, TenantID: t.TenantID})
		if _, err := rd.store.Put(ctx, idx, entry, storage.IfNotExists()); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
			return "", "", err
		}
		return s, key, nil
	}
	return "", "", fmt.Errorf("%w: %s (its index entry was poison)", lifecycle.ErrRunNotFound, runID)
}

// status: see Runner.Status.
func (rd *reads) status(ctx context.Context, runID string) (lifecycle.RunStatus, error) {
	slug, key, err := rd.locate(ctx, runID)
	if err != nil {
		return lifecycle.RunStatus{}, err
	}
	doc, _, err := rd.statuses.read(ctx, slug, runID, key)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && !tenancy.Sees(ctx, doc.TenantID)) {
		return lifecycle.RunStatus{}, fmt.Errorf("%w: %s", lifecycle.ErrRunNotFound, runID)
	}
	rd.markLost(&doc)
	return doc, err
}

// markLost sets a read's RunnerLostAt (docs/spec.md#run-status): the run is
// executing, but its lease expired by this runner's clock, so the runner
// that holds it stopped heartbeating and none has taken it over yet. It is
// the same test a claim makes before taking a run over.
func (rd *reads) markLost(d *lifecycle.RunStatus) {
	d.RunnerLostAt = nil
	if d.Lease == nil || !rd.now().After(d.Lease.ExpiresAt) {
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

// steps: see Runner.Steps.
func (rd *reads) steps(ctx context.Context, runID string) ([]lifecycle.StepRecord, error) {
	slug, _, err := rd.locate(ctx, runID)
	if err != nil {
		return nil, err
	}
	return rd.readSteps(ctx, slug, runID)
}

func (rd *reads) readSteps(ctx context.Context, slug, runID string) ([]lifecycle.StepRecord, error) {
	prefix, err := layout.RunStepsPrefix(slug, runID)
	if err != nil {
		return nil, err
	}
	var out []lifecycle.StepRecord
	for key, err := range rd.store.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		b, _, err := rd.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var s lifecycle.StepRecord
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("run: step file %s: %w", key, err)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StepNumber < out[j].StepNumber })
	return out, nil
}

// runs: see Runner.Runs.
func (rd *reads) runs(ctx context.Context, slug string) ([]lifecycle.RunStatus, error) {
	prefix, err := layout.AgentRunsPrefix(slug)
	if err != nil {
		return nil, &RequestError{Field: "agent", Reason: err.Error()}
	}
	var out []lifecycle.RunStatus
	for key, err := range rd.store.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		_, runID, ok := layout.ParseRunStatusKey(key)
		if !ok {
			continue
		}
		doc, _, err := rd.statuses.read(ctx, slug, runID, key)
		if errors.Is(err, storage.ErrNotFound) || errors.Is(err, lifecycle.ErrCorrupt) {
			continue // gone, or poison: quarantined
		}
		if err != nil {
			return nil, err
		}
		if !tenancy.Sees(ctx, doc.TenantID) {
			continue // another tenant's run, as missing as in Status
		}
		rd.markLost(&doc)
		out = append(out, doc)
	}
	return out, nil
}

// activeRuns: see Runner.ActiveRuns.
func (rd *reads) activeRuns(ctx context.Context) (map[string]int, error) {
	by, err := rd.activeRunsByTenant(ctx)
	if err != nil {
		return nil, err
	}
	out := rd.activeZero()
	for _, counts := range by {
		for s, n := range counts {
			out[s] += n
		}
	}
	return out, nil
}

// activeZero is every state that is not terminal of this runner's
// agents' machines, at 0.
func (rd *reads) activeZero() map[string]int {
	out := map[string]int{}
	for _, a := range rd.cat.agents {
		f, _ := flowFor(a.Machine)
		for _, s := range f.states {
			if !f.terminal(s) {
				out[s] = 0
			}
		}
	}
	return out
}

// activeRunsByTenant: see Runner.ActiveRunsByTenant.
func (rd *reads) activeRunsByTenant(ctx context.Context) (map[string]map[string]int, error) {
	// The caller's tenant even with no run (the default one for a caller
	// of every tenant), so a gauge reads 0 rather than nothing.
	out := map[string]map[string]int{tenancy.Creating(ctx): rd.activeZero()}
	for key, err := range rd.store.List(ctx, layout.RunActivePrefix) {
		if err != nil {
			return nil, err
		}
		slug, runID, ok := layout.ParseRunActiveKey(key)
		if !ok {
			continue
		}
		doc, ok, err := rd.readListed(ctx, slug, runID)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if !tenancy.Sees(ctx, doc.TenantID) || rd.cat.flowOfDoc(&doc).terminal(doc.Status) {
			continue
		}
		if out[doc.TenantID] == nil {
			out[doc.TenantID] = rd.activeZero()
		}
		out[doc.TenantID][doc.Status]++
	}
	return out, nil
}

// wait: see Runner.Wait.
func (rd *reads) wait(ctx context.Context, runID string) (lifecycle.RunStatus, error) {
	for {
		changed := rd.changes.next()
		doc, err := rd.status(ctx, runID)
		if err != nil {
			return doc, err
		}
		f := rd.cat.flowOfDoc(&doc)
		if f.terminal(doc.Status) || (doc.Lease == nil && slices.Contains(f.parked, doc.Status)) {
			return doc, nil
		}
		t := rd.clock.NewTimer(rd.pollInterval)
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
func (rd *reads) readListed(ctx context.Context, slug, runID string) (doc lifecycle.RunStatus, ok bool, err error) {
	statusKey, err := layout.RunStatusKey(slug, runID)
	if err != nil {
		return lifecycle.RunStatus{}, false, nil
	}
	doc, _, err = rd.statuses.read(ctx, slug, runID, statusKey)
	switch {
	case errors.Is(err, storage.ErrNotFound) || errors.Is(err, lifecycle.ErrCorrupt):
		return lifecycle.RunStatus{}, false, nil
	case err != nil:
		return lifecycle.RunStatus{}, false, err
	}
	return doc, true, nil
}
