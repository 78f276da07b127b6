package records

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Expand returns the events of the audit object ev was decoded from, whose id
// is id: ev alone, with the id, or, for a batch (Prior), the prior
// events then ev, each with id "{id}.{k as 3 digits}" (k from 0), so the
// batch's events sort in their order, after every earlier object's and
// before every later one's. Prior is emptied in the results.
func Expand(ev lifecycle.AuditEvent, id string) []lifecycle.AuditEvent {
	if len(ev.Prior) == 0 {
		ev.ID = id
		return []lifecycle.AuditEvent{ev}
	}
	out := make([]lifecycle.AuditEvent, 0, len(ev.Prior)+1)
	for _, p := range ev.Prior {
		p.Prior = nil
		out = append(out, p)
	}
	ev.Prior = nil
	out = append(out, ev)
	for k := range out {
		out[k].ID = fmt.Sprintf("%s.%03d", id, k)
	}
	return out
}

// AuditLog writes audit events create-only to audit/YYYYMMDD/<event_id>.json.
// The zero value of the optional fields is usable.
type AuditLog struct {
	// Store receives the events. Required.
	Store *storage.Store
	// Node fills lifecycle.AuditEvent.Node when an event leaves it empty.
	Node string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// AuditEventID is the one audit event id scheme of the SDK:
// "{ts as 20060102T150405.000000000Z}-{16 hex}-{seq as 10 digits}-{i}".
// Ids sort by time across nodes to the nanosecond, so listing a day reads
// its events in time order. With a subject (say, a job id) the 16 hex are
// a digest of it and the id of the i-th event of the subject's write seq
// is the same on every try, so a create-only write stores it once and a
// later writer can re-emit an event a dead one never wrote; a subject's
// events sort by time, then seq, then i. Without a subject
// (NewAuditEventID) the 16 hex are random.
func AuditEventID(ts time.Time, subject string, seq int64, i int) string {
	var h [8]byte
	if subject == "" {
		_, _ = rand.Read(h[:]) // crypto/rand.Read never fails (Go 1.24+).
	} else {
		sum := sha256.Sum256([]byte(subject))
		copy(h[:], sum[:])
	}
	return ts.UTC().Format("20060102T150405.000000000Z") + "-" + hex.EncodeToString(h[:]) +
		"-" + fmt.Sprintf("%010d", seq) + "-" + strconv.Itoa(i)
}

// NewAuditEventID returns a fresh AuditEventID without a subject: unique
// by its 64 random bits.
func NewAuditEventID(ts time.Time) string { return AuditEventID(ts, "", 0, 0) }

// Record fills in ts (if zero), node (if empty) and a fresh id, then writes
// ev create-only under audit/YYYYMMDD/{eventId}.json, the day being the day
// of its ts in UTC. It returns the event as written.
func (l *AuditLog) Record(ctx context.Context, ev lifecycle.AuditEvent) (lifecycle.AuditEvent, error) {
	if l.Store == nil {
		return ev, errors.New("storage: AuditLog has no Store")
	}
	if ev.TS.IsZero() {
		now := time.Now
		if l.Now != nil {
			now = l.Now
		}
		ev.TS = now()
	}
	ev.TS = ev.TS.UTC()
	if ev.Node == "" {
		ev.Node = l.Node
	}
	if ev.Event == "" || ev.Actor == "" {
		return ev, errors.New("storage: audit event needs event and actor")
	}
	b, err := MarshalAudit(&ev)
	if err != nil {
		return ev, fmt.Errorf("storage: encode audit event: %w", err)
	}
	// 64 random bits make an id collision practically impossible; should one
	// happen, create-only refuses it and a second id is drawn.
	for attempt := 0; ; attempt++ {
		ev.ID = NewAuditEventID(ev.TS)
		key, err := layout.AuditKey(ev.TS, ev.ID)
		if err != nil {
			return ev, err
		}
		_, err = l.Store.Put(ctx, key, b, storage.IfNotExists())
		if err == nil || !errors.Is(err, storage.ErrPreconditionFailed) || attempt == 2 {
			return ev, err
		}
	}
}

// ReadAuditDay yields the audit events of the objects of one UTC day in
// id order, a batch's events expanded (Expand). Objects sort by
// the time of their last event; the prior events of a batch keep their own
// times, which may be earlier (even the day before). A malformed object
// yields an error and ends the iteration.
func ReadAuditDay(ctx context.Context, s *storage.Store, day time.Time) iter.Seq2[lifecycle.AuditEvent, error] {
	prefix := layout.AuditDayPrefix(day)
	return func(yield func(lifecycle.AuditEvent, error) bool) {
		for key, err := range s.List(ctx, prefix) {
			if err != nil {
				yield(lifecycle.AuditEvent{}, err)
				return
			}
			b, _, err := s.Get(ctx, key)
			if errors.Is(err, storage.ErrNotFound) {
				continue // deleted since listing
			}
			if err != nil {
				yield(lifecycle.AuditEvent{}, err)
				return
			}
			var ev lifecycle.AuditEvent
			if err := json.Unmarshal(b, &ev); err != nil {
				yield(lifecycle.AuditEvent{}, fmt.Errorf("storage: decode audit event %s: %w", key, err))
				return
			}
			id, _ := layout.ParseAuditKey(key) // the id, .json or not: a listed key is under the day's prefix
			for _, e := range Expand(ev, id) {
				if !yield(e, nil) {
					return
				}
			}
		}
	}
}
