package run

import (
	"context"
	"fmt"
	"slices"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
)

// listRuns: see Runner.ListRuns.
func (rd *reads) listRuns(ctx context.Context, q RunQuery) (RunPage, error) {
	limit, err := core.PageLimit(q.Limit)
	if err != nil {
		return RunPage{}, err
	}
	after, err := core.PageCursor(q.Cursor, func(e string) bool { _, _, ok := layout.ParseNewestFirst(e); return ok })
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
	runs, next, err := core.ReadPage(ctx, rd.store, prefixes, after, limit, 0, func(ctx context.Context, i int, entry string) (Status, bool, error) {
		_, runID, ok := layout.ParseNewestFirst(entry)
		if !ok {
			return Status{}, false, nil // not an entry of ours
		}
		doc, ok, err := rd.readListed(ctx, slugs[i], runID)
		if !ok || err != nil {
			return Status{}, false, err
		}
		rd.markLost(&doc)
		return doc, q.Status == "" || doc.Status == q.Status, nil
	})
	if err != nil {
		return RunPage{}, err
	}
	return RunPage{Runs: runs, Next: next}, nil
}

// runningByHeartbeat: see Runner.RunningByHeartbeat.
func (rd *reads) runningByHeartbeat(ctx context.Context, limit int) ([]Status, error) {
	var out []Status
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
	slices.SortStableFunc(out, func(a, b Status) int {
		return derefTime(a.LastHeartbeatAt).Compare(derefTime(b.LastHeartbeatAt))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
