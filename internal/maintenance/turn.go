package maintenance

import (
	"context"
	"errors"
	"time"

	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Doc is the document of a Turn: a typed document (lifecycle.Meta embedded)
// carrying the turn's lease.
type Doc[T any] interface {
	records.Doc[T]
	// TurnLease returns the lease in the document, to read and write.
	TurnLease() *lifecycle.Lease
}

// ErrNotMyTurn is Take's answer when another process holds the turn or no
// turn is due.
var ErrNotMyTurn = errors.New("maintenance: not this process's turn")

// Turn is the one helper for "once per period across processes": the
// processes sharing a store each ask for the turn, and the one that takes
// it makes the pass. The turn is a lease in the document at Key, taken by a
// compare-and-swap (fence.Record), its epoch one more than the last; the
// document also says when the next turn is due (Due) and where a pass
// stands (its cursor), so a pass whose process died is resumed by the next
// one to take the lapsed lease.
type Turn[T any, P Doc[T]] struct {
	Store *storage.Store
	Key   string
	// Owner names this process in the lease.
	Owner string
	Clock clock.Clock
	// TTL is how long a lease lasts unless renewed.
	TTL time.Duration
	// Due tells whether a turn is due in the document at now; nil: always.
	// A live lease of another process is never taken, whatever Due says.
	Due func(doc P, now time.Time) bool
	// Begin prepares the document for the turn just taken (a new pass's
	// cursor); nil: nothing.
	Begin func(doc P, now time.Time)
	// Quarantine moves a document that does not decode out of the way;
	// Take then makes the turn's record anew, once.
	Quarantine func(ctx context.Context, ce *lifecycle.QuarantinedError) error
	// Lapse makes the Record Take returns refuse a write once the lease
	// has lapsed, though no process took it yet.
	Lapse bool
}

// Take takes the turn if it is due and free: it returns the document
// before and after the take, and the Record to write the pass's progress
// through, fenced on the lease taken (a write after another process took
// the turn fails with lifecycle.ErrLeaseLost). Not this process's turn:
// ErrNotMyTurn.
func (t *Turn[T, P]) Take(ctx context.Context) (rec *fence.Record[T, P], before, after T, err error) {
	now := t.Clock.Now().UTC()
	take := func(d P) error {
		l := d.TurnLease()
		if records.LeaseLive(l, now) && l.Owner != t.Owner {
			return ErrNotMyTurn
		}
		if t.Due != nil && !t.Due(d, now) {
			return ErrNotMyTurn
		}
		*l = lifecycle.Lease{Owner: t.Owner, Epoch: l.Epoch + 1, ExpiresAt: now.Add(t.TTL)}
		if t.Begin != nil {
			t.Begin(d, now)
		}
		return nil
	}
	r := t.record()
	// The record is read first (a turn not due costs one read); it is
	// created only when missing, and one created by another process
	// meanwhile is judged as read. Bounded: each round either returns or
	// met another process's write.
	quarantined := false
	for range 4 {
		before, after, err = r.Apply(ctx, take)
		var ce *lifecycle.QuarantinedError
		switch {
		case errors.As(err, &ce):
			if quarantined || t.Quarantine == nil {
				return nil, before, after, err
			}
			// A record that does not decode blocks nothing: it goes to
			// quarantine like any poison record, and the turn is made anew.
			if err := t.Quarantine(ctx, ce); err != nil {
				return nil, before, after, err
			}
			quarantined = true
		case errors.Is(err, storage.ErrNotFound):
			var first T
			if err := take(&first); err != nil {
				return nil, before, after, err
			}
			_, err = r.Create(ctx, first)
			if err == nil {
				return t.fenced(r, first), before, first, nil
			}
			if !errors.Is(err, storage.ErrPreconditionFailed) {
				return nil, before, after, err
			}
		case err != nil:
			return nil, before, after, err
		default:
			return t.fenced(r, after), before, after, nil
		}
	}
	return nil, before, after, err
}

func (t *Turn[T, P]) record() *fence.Record[T, P] {
	return &fence.Record[T, P]{Store: t.Store, Key: t.Key, Lease: P.TurnLease}
}

// fenced returns the Record of the lease holder, seeded with doc as r
// wrote it.
func (t *Turn[T, P]) fenced(r *fence.Record[T, P], doc T) *fence.Record[T, P] {
	_, ver := r.Snapshot()
	f := t.record()
	f.Owner, f.Epoch = t.Owner, P(&doc).TurnLease().Epoch
	if t.Lapse {
		f.Now = t.Clock.Now
	}
	f.Seed(doc, ver)
	return f
}

// Renew writes change and the lease renewed for TTL through rec, Take's
// Record; it fails with lifecycle.ErrLeaseLost once the turn is lost.
func (t *Turn[T, P]) Renew(ctx context.Context, rec *fence.Record[T, P], change func(P)) error {
	now := t.Clock.Now().UTC()
	_, _, err := rec.Apply(ctx, func(d P) error {
		change(d)
		d.TurnLease().ExpiresAt = now.Add(t.TTL)
		return nil
	})
	return err
}

// Renewed renews the lease through rec (with no other change) when it is
// no longer certainly this process's (fence.LeaseCertain), and tells, by
// its error, whether the turn is still held.
func (t *Turn[T, P]) Renewed(ctx context.Context, rec *fence.Record[T, P]) error {
	doc, _ := rec.Snapshot()
	if fence.LeaseCertain(P(&doc).TurnLease().ExpiresAt, t.Clock.Now(), t.TTL) {
		return nil
	}
	return t.Renew(ctx, rec, func(P) {})
}

// Release ends the turn: it writes change and gives the lease back (its
// owner cleared, its epoch kept so epochs only grow, expired now), so the
// next turn is the next process's as soon as Due says.
func (t *Turn[T, P]) Release(ctx context.Context, rec *fence.Record[T, P], change func(P)) error {
	now := t.Clock.Now().UTC()
	_, _, err := rec.Apply(ctx, func(d P) error {
		change(d)
		l := d.TurnLease()
		*l = lifecycle.Lease{Epoch: l.Epoch, ExpiresAt: now}
		return nil
	})
	return err
}
