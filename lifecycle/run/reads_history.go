package run

import (
	"context"
	"fmt"
	"slices"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/paging"
	"github.com/runconveyor/conveyor/lifecycle"
)

// listRuns: see Runner.ListRuns.
func (rd *reads) listRuns(ctx context.Context, q RunQuery) (RunPage, error) {
	if q.Repo != "" {
		return rd.listRepoRuns(ctx, q)
	}
	limit, err := paging.Limit(q.Limit)
	if err != nil {
		return RunPage{}, err
	}
	after, err := paging.Cursor(q.Cursor, func(e string) bool { _, _, ok := layout.ParseNewestFirst(e); return ok })
	if err != nil {
		return RunPage{}, err
	}
	if q.Status != "" && !rd.cat.knownStatus(q.Status) {
		return RunPage{}, &RequestError{Field: "status", Reason: fmt.Sprintf("%q is not a state of any run machine", q.Status)}
	}
	slugs := []string{q.Agent}
	if q.Agent == "" {
		slugs = rd.cat.slugs()
	}
	tenant := listedTenant(ctx, q)
	prefixes := make([]string, len(slugs))
	for i, s := range slugs {
		if q.Status == "" {
			prefixes[i], err = layout.TenantRunHistoryAgentPrefix(tenant, s)
		} else {
			prefixes[i], err = layout.TenantRunStatusIndexAgentPrefix(tenant, s, q.Status)
		}
		if err != nil {
			return RunPage{}, &RequestError{Field: "agent", Reason: err.Error()}
		}
	}
	runs, next, err := paging.Read(ctx, rd.store, prefixes, after, limit, 0, func(ctx context.Context, i int, entry string) (lifecycle.RunStatus, bool, error) {
		_, runID, ok := layout.ParseNewestFirst(entry)
		if !ok {
			return lifecycle.RunStatus{}, false, nil // not an entry of ours
		}
		doc, ok, err := rd.readListed(ctx, slugs[i], runID)
		if !ok || err != nil {
			return lifecycle.RunStatus{}, false, err
		}
		rd.markLost(&doc)
		return doc, doc.TenantID == tenant && (q.Status == "" || doc.Status == q.Status), nil
	})
	if err != nil {
		return RunPage{}, err
	}
	return RunPage{Runs: runs, Next: next}, nil
}

// runningByHeartbeat returns the runs being executed (running, and
// cancel_requested on the cancel-aware machine) of this runner's agents,
// the oldest last_heartbeat_at first, at most limit (0: every one): the
// orphan query (docs/spec.md, "Recovery"). It reads the agents' status
// index entries of those states, which hold the executing runs only, and
// sorts them by heartbeat in memory: its cost is the runs executing
// (bounded by the agents' slots), never the history, and it adds no index
// key that a heartbeat would have to move
// (docs/design.md#listing-and-indexes). A run whose lease has lapsed
// (Lease.ExpiresAt passed) has lost its runner; the next poll of any
// runner takes it over.
func (rd *reads) runningByHeartbeat(ctx context.Context, limit int) ([]lifecycle.RunStatus, error) {
	var out []lifecycle.RunStatus
	for _, slug := range rd.cat.slugs() {
		f := rd.cat.agents[slug].flow
		for _, s := range f.states {
			if !f.executing(s) {
				continue
			}
			prefix, err := layout.RunStatusIndexAgentPrefix(slug, s)
			if err != nil {
				return nil, err
			}
			for key, err := range rd.store.List(ctx, prefix) {
				if err != nil {
					return nil, err
				}
				_, runID, ok := layout.ParseNewestFirst(key[len(prefix):])
				if !ok {
					continue
				}
				doc, ok, err := rd.readListed(ctx, slug, runID)
				if err != nil {
					return nil, err
				}
				if ok && doc.Status == s {
					rd.markLost(&doc)
					out = append(out, doc)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b lifecycle.RunStatus) int {
		return derefTime(a.LastHeartbeatAt).Compare(derefTime(b.LastHeartbeatAt))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// listedTenant is the tenant whose runs a list answers: the caller's,
// or the one q names for a caller of every tenant.
func listedTenant(ctx context.Context, q RunQuery) string {
	if tenant := lifecycle.TenantOf(ctx); tenant != lifecycle.AllTenants {
		return tenant
	}
	return q.Tenant
}

// RunQuery selects a page of runs for ListRuns.
type RunQuery struct {
	// Agent is the agent whose runs are listed; "" lists the runs of every
	// agent of this runner.
	Agent string
	// Status keeps only the runs in this state; "" keeps every run.
	Status string
	// Repo, when set, lists the runs of this repository ("owner/name"),
	// newest first, those of Agent only when Agent is set too. Its index
	// holds every agent's and tenant's runs, so a page reads a bounded
	// number of them and may come short, even empty, with a Next to go on.
	Repo string
	// Limit is the most runs in the page: 0 means 50,
	// and more than 500 is refused.
	Limit int
	// Cursor is the Next of the page before; "" for the first page.
	Cursor string
	// Tenant is the tenant whose runs a caller of every tenant
	// (lifecycle.AllTenants) lists; "" is the default tenant. Any other
	// caller lists its own tenant's runs, whatever Tenant says.
	Tenant string
}

// RunPage is a page of runs, newest (by started_at) first.
type RunPage struct {
	Runs []lifecycle.RunStatus
	// Next is the cursor of the next page, "" on the last page.
	Next string
}
