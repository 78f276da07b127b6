package run

import (
	"context"
	"log/slog"

	"github.com/runconveyor/conveyor/internal/layout"
)

// fileExpiry writes the expiry entry of the record just created at key
// (layout.IdempotencyExpiryKey), create-only, under the hour its
// generation expires: the janitor reads the records of hours past and
// nothing else (docs/design.md, Idempotency: "Expiry index"). Only a record's
// first write files it; an expiry moved later is re-filed by the janitor
// when the entry's hour comes. A failed write is logged, not answered:
// the record is written, and the janitor's daily full listing finds a
// record without its entry.
func (im *idempotency) fileExpiry(ctx context.Context, key string, rec *idemClaim) {
	entry, ok := layout.IdempotencyExpiryKey(key, rec.rec.ExpiresAt)
	if !ok {
		return
	}
	if err := putOnce(ctx, im.store, entry, []byte("{}")); err != nil {
		im.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_expiry_entry_failed", slog.String("key", rec.rec.Key), slog.String("error", err.Error()))
	}
}
