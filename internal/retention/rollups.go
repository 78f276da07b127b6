package retention

import (
	"context"
	"errors"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/storage"
)

// visitRollup judges a rollup record of the job queue by the end of its
// hour or day. Rollups are written once (create-only) and never changed,
// so the end is the judge, as for audit days; and they list in time
// order, so the kind ends at the first one too young. One old enough is
// still kept while a reader may need it: an hour until its day's rollup
// exists (a day is built from its hours), a day until the next day's
// exists (the counts start from the latest day).
func (j *Janitor) visitRollup(ctx context.Context, k Kind, key string, now time.Time, age time.Duration, r *Report) error {
	var end time.Time
	var needed string // the record whose presence frees this one
	if k == StatsHours {
		h, ok := layout.ParseStatsHourKey(key)
		if !ok {
			return nil
		}
		end, needed = h.Add(time.Hour), layout.StatsDayKey(h.Truncate(24*time.Hour))
	} else {
		d, ok := layout.ParseStatsDayKey(key)
		if !ok {
			return nil
		}
		end = d.Add(24 * time.Hour)
		needed = layout.StatsDayKey(end)
	}
	if !due(end, now, age) {
		return errKindDone
	}
	if _, _, err := j.cfg.Store.Get(ctx, needed); errors.Is(err, storage.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if err := j.cfg.Store.Delete(ctx, key, storage.Condition{}); err != nil {
		return err
	}
	r.deleted(k, 1)
	r.Keys++
	return nil
}
