package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/paging"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// quarantineRoutes serves the admin's /quarantine over the store, nil when
// none is given.
type quarantineRoutes struct {
	store   *storage.Store
	cursors *cursors
}

func (h *quarantineRoutes) table() []route {
	return []route{
		{method: "GET", path: "/quarantine", operator: true, actors: admin, h: h.listQuarantine()},
		{method: "POST", path: "/quarantine/restore", operator: true, actors: admin, body: true, h: h.restoreQuarantined},
	}
}

func (h *quarantineRoutes) listQuarantine() handlerFunc {
	return needs(h.store != nil, "store for quarantine", pagedRoute(h.cursors, noInput,
		func(ctx context.Context, _ lifecycle.Actor, _ struct{}, p pageParams) ([]lifecycle.Quarantined, string, error) {
			limit, err := paging.Limit(p.limit)
			if err != nil {
				return nil, "", err
			}
			after, err := paging.Cursor(p.cursor, nil)
			if err != nil {
				return nil, "", err
			}
			// In key order from the cursor; a record restored meanwhile is skipped.
			return paging.Read(ctx, h.store, []string{records.QuarantinePrefix}, after, limit, 0,
				func(ctx context.Context, _ int, entry string) (lifecycle.Quarantined, bool, error) {
					q, err := records.ReadQuarantined(ctx, h.store, records.QuarantinePrefix+entry)
					if errors.Is(err, storage.ErrNotFound) {
						return lifecycle.Quarantined{}, false, nil
					}
					return lifecycle.Quarantined{QKey: q.QKey, Key: q.Key, Reason: q.Reason, QuarantinedAt: q.QuarantinedAt, Data: q.Data}, err == nil, err
				})
		}))
}

func (h *quarantineRoutes) restoreQuarantined(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	if h.store == nil {
		return absent("store for quarantine")
	}
	data, err := readBody(r)
	if err != nil {
		return err
	}
	b, err := decodeRestore(data)
	if err != nil {
		return err
	}
	q, err := records.ReadQuarantined(r.Context(), h.store, b.QKey)
	if err != nil {
		return err
	}
	if err := records.Restore(r.Context(), h.store, b.QKey, q.Data); err != nil {
		if errors.Is(err, storage.ErrPreconditionFailed) {
			return apiErr(codes.Conflict, "%s: the original key was written since, or a quarantine is in progress: %v", b.QKey, err)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
