package retention

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/storage"
)

// The idempotency records are read through their expiry index
// (layout.IdempotencyExpiryKey, docs/design.md#idempotency, "Expiry
// index"): a pass lists the entries of the hours whose end is at least the
// kind's age past, reads their records, deletes the expired ones (fenced
// on the version read) then their entries, and files the others again
// under the hour they now expire. Every IdempotencyFullListing a pass
// lists every record as well, for those without an entry.

// idemFullDue tells whether the pass starting at now lists every
// idempotency record, one every Config.IdempotencyFullListing.
func idemFullDue(every time.Duration, s *state, now time.Time) bool {
	return now.Sub(s.IdemFullAt) >= every
}

// idemPrefixes are the Idempotency kind's listings: the expiry index, and
// every record and marker first on a full listing ("idempotency/" sorts
// before "index/", so one cursor spans both).
func idemPrefixes(full bool) []string {
	if full {
		return []string{layout.IdempotencyPrefix, layout.IdempotencyExpiryPrefix}
	}
	return []string{layout.IdempotencyExpiryPrefix}
}

// idemStop is the first expiry entry key of an hour not yet due at age:
// the hour that holds now minus age has not ended that long ago, so
// neither it nor any later hour is listed.
func idemStop(now time.Time, age time.Duration) string {
	return layout.IdempotencyExpiryHourPrefix(now.UTC().Add(-age).Truncate(time.Hour))
}

// visitExpiryEntry judges the record an expiry entry names. An entry
// whose key names no record is skipped (counted); one whose record is gone
// (deleted by a full listing, or a janitor stopped between the two
// deletes) or does not decode is deleted; a record not yet eligible is
// filed again.
func (j *Janitor) visitExpiryEntry(ctx context.Context, key string, now time.Time, age time.Duration, r *Report) error {
	_, recKey, ok := layout.ParseIdempotencyExpiryKey(key)
	if !ok {
		r.Skipped++
		return nil
	}
	b, ver, err := j.cfg.Store.Get(ctx, recKey)
	var rec idemrecord.Record
	switch {
	case errors.Is(err, storage.ErrNotFound):
		// One not-found is enough, even on a store that settles: a record
		// read missing wrongly loses only its entry, and the full listing
		// still judges it (at most IdempotencyFullListing late).
		r.Changed++
		return j.cfg.Store.Delete(ctx, key, storage.Condition{})
	case err != nil:
		return err
	case json.Unmarshal(b, &rec) != nil:
		// Left to the submit that reads it (which quarantines it) and to
		// the full listing; its entry would only be read again each pass.
		r.Skipped++
		return j.cfg.Store.Delete(ctx, key, storage.Condition{})
	}
	if !IdempotencyEligible(&rec, now, age) {
		return refile(ctx, j.cfg.Store, key, recKey, &rec, now, age, r)
	}
	// A record written since the read (a new generation) stays, and so
	// does its entry: the next pass reads it again and re-files it.
	if gone, err := j.deleteIfMatch(ctx, Idempotency, recKey, ver, r); !gone || err != nil {
		return err
	}
	return j.cfg.Store.Delete(ctx, key, storage.Condition{})
}

// refile files a record not yet eligible under the hour it becomes so
// (its expiry, or its lease's end when later), or an hour from now when
// that cannot be told, then deletes the entry read. The new entry comes
// first: a janitor stopped between leaves two entries, never none.
func refile(ctx context.Context, store *storage.Store, key, recKey string, rec *idemrecord.Record, now time.Time, age time.Duration, r *Report) error {
	at := rec.ExpiresAt
	if rec.Status == idemrecord.Processing {
		if lease, ok := rec.LeaseEnd(); ok {
			at = later(at, lease)
		}
	}
	if at.IsZero() || !at.Add(age).After(now) {
		// Not eligible, yet not for its time: a processing record
		// without a lease, which is never judged; looked at again later.
		at = now.Add(time.Hour)
	}
	next, ok := layout.IdempotencyExpiryKey(recKey, at)
	if !ok || next == key {
		return nil
	}
	if _, err := store.Put(ctx, next, []byte("{}"), storage.IfNotExists()); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		return err
	}
	r.Refiled++
	return store.Delete(ctx, key, storage.Condition{})
}
