package quarantine

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Mover moves one engine's poison records under quarantine/
// (records.Quarantine), logs record_quarantined at WARN and counts them.
// The zero value is not usable; set Store and Clock.
type Mover struct {
	Store *storage.Store
	Clock clock.Clock
	// Log receives record_quarantined and quarantine_failed; nil discards.
	Log *slog.Logger

	n atomic.Int64
}

// Count reports how many records this Mover moved.
func (q *Mover) Count() int64 { return q.n.Load() }

// Move quarantines the record of ce and returns where its copy is. A record
// another process already moved is not an error; one that changed since it
// was read (someone repaired it) is left alone and the error matches
// storage.ErrPreconditionFailed.
func (q *Mover) Move(ctx context.Context, ce *lifecycle.QuarantinedError) (string, error) {
	qkey, err := records.Quarantine(ctx, q.Store, ce, q.Clock.Now())
	if errors.Is(err, storage.ErrNotFound) {
		err = nil // someone else quarantined it first
	}
	if err != nil {
		if q.Log != nil {
			q.Log.LogAttrs(ctx, slog.LevelWarn, "quarantine_failed", slog.String("key", ce.Key), slog.String("error", err.Error()))
		}
		return qkey, err
	}
	q.n.Add(1)
	if q.Log != nil {
		q.Log.LogAttrs(ctx, slog.LevelWarn, "record_quarantined", slog.String("key", ce.Key), slog.String("qkey", qkey),
			slog.String("reason", ce.Error()))
	}
	return qkey, nil
}
