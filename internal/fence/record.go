package fence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// MaxConflicts bounds how often one Apply re-reads after losing a
// compare-and-swap before it gives up; each retry re-reads, so this is no
// busy loop, and 64 lost races in a row mean a record too hot to write.
const MaxConflicts = 64

// Record is the one read-check-write of a typed document at one key. It
// keeps the document and store version of its last read or write, so on the
// happy path Apply writes with IfMatch and never reads; a conflict makes it
// re-read and judge the change again on the fresh document.
//
// A Record with an Epoch is an owner's: before every write it checks that
// the document still carries its lease (Owner, Epoch), and the write is
// conditional on the version it checked, so the check and the write are one
// atomic step. A Record without an Epoch writes on the document's state
// alone (a cancel request, an operator's requeue).
//
// Documents that cannot be decoded or fail Validate come back as a
// *lifecycle.QuarantinedError carrying their bytes and version, for the caller to
// quarantine. Methods are safe for concurrent use; writes are serialized.
type Record[T any, P records.Doc[T]] struct {
	Store *storage.Store
	Key   string
	// Lease returns the document's lease field; required when Epoch > 0.
	Lease func(P) *lifecycle.Lease
	// Owner and Epoch fence the writer; Epoch 0 means unfenced.
	Owner string
	Epoch int64
	// Now, when set on a fenced Record, also refuses a write whose lease
	// has lapsed though no one took it over yet: another process may at any
	// moment, so the writer must not go on as the owner.
	Now func() time.Time
	// Clone deep-copies a document so a refused or retried change never
	// touches the cached one; nil means a shallow copy, enough when changes
	// replace pointer fields rather than write through them.
	Clone func(P) T
	// Validate judges a decoded document; an error makes it poison.
	Validate func(P) error
	// Trim, when set, shapes the stored copy of a document whose write
	// carries also's writes in its commit: what they record is left out of
	// it (a job's moves, once in the audit object of the same commit). The
	// document an Apply returns keeps it; the cached one is the stored one.
	Trim func(P)

	mu     sync.Mutex
	doc    T
	ver    storage.Version
	cached bool
	fresh  bool
}

// Seed caches doc as the document at version ver (just created, or read by
// the caller), so the next Apply writes without reading. A change that the
// cached document refuses is judged again on a fresh read before Apply
// refuses it.
func (r *Record[T, P]) Seed(doc T, ver storage.Version) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.doc, r.ver, r.cached, r.fresh = doc, ver, true, false
}

// Snapshot returns a copy of the document last read or written, and its
// version ("" before any).
func (r *Record[T, P]) Snapshot() (T, storage.Version) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clone(&r.doc), r.ver
}

// Load reads the document from the store and caches it.
func (r *Record[T, P]) Load(ctx context.Context) (T, storage.Version, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reload(ctx); err != nil {
		var zero T
		return zero, "", err
	}
	r.fresh = false // by the next Apply, someone may have written
	return r.clone(&r.doc), r.ver, nil
}

// Decode is how every engine reads a typed document: JSON into T, the
// members T does not know kept for the next write (records.Keep), then
// validate; any failing gives a *lifecycle.QuarantinedError.
func Decode[T any, P records.Doc[T]](key string, b []byte, ver storage.Version, validate func(P) error) (T, error) {
	var doc T
	if err := records.Decode[T, P](key, b, ver, &doc); err != nil {
		return doc, err
	}
	if validate != nil {
		if err := validate(P(&doc)); err != nil {
			return doc, &lifecycle.QuarantinedError{Key: key, Version: string(ver), Data: b, Reason: "invalid", Err: err}
		}
	}
	return doc, nil
}

func (r *Record[T, P]) reload(ctx context.Context) error {
	b, v, err := r.Store.Get(ctx, r.Key)
	if err != nil {
		return err
	}
	doc, err := Decode[T, P](r.Key, b, v, r.Validate)
	if err != nil {
		return err
	}
	r.doc, r.ver, r.cached, r.fresh = doc, v, true, true
	return nil
}

func (r *Record[T, P]) clone(d *T) T {
	if r.Clone != nil {
		return r.Clone(P(d))
	}
	return *d
}

// fence refuses a write by an owner whose lease is no longer in doc.
func (r *Record[T, P]) fence(doc P) error {
	if r.Epoch == 0 {
		return nil
	}
	l := r.Lease(doc)
	if records.HeldBy(l, r.Owner, r.Epoch) {
		if r.Now != nil && !r.Now().Before(l.ExpiresAt) {
			return &lifecycle.LeaseLostError{Key: r.Key, Owner: r.Owner, Epoch: r.Epoch, Expired: true}
		}
		return nil
	}
	e := &lifecycle.LeaseLostError{Key: r.Key, Owner: r.Owner, Epoch: r.Epoch}
	if l != nil {
		e.Holder, e.HolderEpoch = l.Owner, l.Epoch
	}
	return e
}

// Confirm reads the document afresh and tells whether the writer still
// holds its lease there: nil, or the *lifecycle.LeaseLostError a write would
// get. An owner calls it before a write of another object when LeaseCertain
// can no longer vouch for the lease.
func (r *Record[T, P]) Confirm(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reload(ctx); err != nil {
		return err
	}
	r.fresh = false
	return r.fence(&r.doc)
}

// LeaseCertain tells, without I/O, whether a lease this process wrote with
// expiry expires (for ttl) is certainly still its own at now: no other
// process takes a record over before its lease expires, and a tenth of the
// ttl is kept as a margin for clock skew and the write still to come.
func LeaseCertain(expires, now time.Time, ttl time.Duration) bool {
	return now.Before(expires.Add(-ttl / 10))
}

// Apply runs change on a copy of the document and writes the result with
// its lifecycle.Meta counter bumped and the members of the stored record
// its type does not know written back as read (records.Encode), conditional on the version the change
// was judged on. change may run more than once (after a conflict) and must
// touch only its argument. An error from change is returned as it is, once
// it was judged on a freshly read document; nothing is written. It returns
// the document before and after the change.
func (r *Record[T, P]) Apply(ctx context.Context, change func(P) error) (before, after T, err error) {
	before, after, _, err = r.ApplyWith(ctx, change, nil)
	return before, after, err
}

// ApplyWith is Apply that, on a store that commits several keys at once
// (storage.Store.CanCommit), commits the writes also returns for the
// changed document (its counter bumped) with the record's, in one
// commit: the record's IfMatch is the commit's condition, as Apply's
// Put's, and each of the others keeps its own. committed tells whether
// they landed with it. A commit refused by one of the others' conditions
// is retried as Apply's write alone (the caller then writes the others as
// it would have without a commit). also nil, or a store that cannot
// commit, is Apply.
func (r *Record[T, P]) ApplyWith(ctx context.Context, change func(P) error, also func(P) ([]storage.Write, error)) (before, after T, committed bool, err error) {
	if also != nil && !r.Store.CanCommit() {
		also = nil
	}
	before, after, committed, _, err = r.apply(ctx, change, nil, also)
	return before, after, committed, err
}

// ApplyJoint is ApplyWith whose writes must (given the changed document)
// land with the record's or none does, on a store that commits: a
// refusal of one of their conditions ends it with that error and nothing
// written (a refusal of one of also's is retried without also's, as
// ApplyWith does). It returns must's writes' versions, in order (a
// Delete's is ""; a write whose commit's outcome was unknown but landed,
// read back: "" if the key changed since); committed tells whether
// also's landed too. A store that cannot commit gives an error matching
// errors.ErrUnsupported, writing nothing.
func (r *Record[T, P]) ApplyJoint(ctx context.Context, change func(P) error, must, also func(P) ([]storage.Write, error)) (before, after T, committed bool, mustVers []storage.Version, err error) {
	if !r.Store.CanCommit() {
		return before, after, false, nil, fmt.Errorf("conveyor: %s: a joint write: %w", r.Key, errors.ErrUnsupported)
	}
	return r.apply(ctx, change, must, also)
}

// apply is ApplyWith and ApplyJoint: the record's write, with must's
// writes joined to it and also's when they can be.
func (r *Record[T, P]) apply(ctx context.Context, change func(P) error, must, also func(P) ([]storage.Write, error)) (before, after T, committed bool, mustVers []storage.Version, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.cached {
		if err := r.reload(ctx); err != nil {
			return before, after, false, nil, err
		}
	}
	fresh := r.fresh // else the cached document may be stale until re-read
	r.fresh = false
	for conflicts := 0; ; {
		doc := r.clone(&r.doc)
		if err := r.fence(&doc); err != nil {
			if fresh {
				return before, after, false, nil, err
			}
			if err := r.reload(ctx); err != nil {
				return before, after, false, nil, err
			}
			fresh = true
			continue
		}
		prior := r.clone(&r.doc)
		if err := change(&doc); err != nil {
			if fresh {
				return before, after, false, nil, err
			}
			// Someone else may have moved the record since our last write:
			// judge the change against the stored document before refusing.
			if err := r.reload(ctx); err != nil {
				return before, after, false, nil, err
			}
			fresh = true
			continue
		}
		P(&doc).StorageMeta().Version++
		w, err := r.put(ctx, &doc, must, also)
		if w.b == nil {
			return before, after, false, nil, err // not encoded: nothing written
		}
		if w.commit && err != nil && !errors.Is(err, storage.ErrOutcomeUnknown) && !failedAt(err, r.Key) {
			if failedAtAny(err, w.must) {
				return before, after, false, nil, err // a joint write refused: nothing written
			}
			also = nil // another write's condition: without it, as Apply writes it
			continue
		}
		switch {
		case err == nil:
			r.doc, r.ver, r.fresh = w.storedDoc(doc), w.v, false
			return prior, r.clone(&doc), w.with, w.mustVers, nil
		case errors.Is(err, storage.ErrOutcomeUnknown):
			// The write may have landed: it did if the stored bytes are
			// ours (a commit lands whole or not at all).
			got, gv, gerr := r.Store.Get(ctx, r.Key)
			if gerr == nil && bytes.Equal(got, w.b) {
				r.doc, r.ver, r.fresh = w.storedDoc(doc), gv, false
				return prior, r.clone(&doc), w.with, r.readBack(ctx, w.must), nil
			}
		case errors.Is(err, storage.ErrPreconditionFailed):
		default:
			return before, after, false, nil, err
		}
		if conflicts++; conflicts > MaxConflicts {
			return before, after, false, nil, fmt.Errorf("conveyor: %s: gave up after %d conflicting writes: %w", r.Key, MaxConflicts, err)
		}
		if err := r.reload(ctx); err != nil {
			return before, after, false, nil, err
		}
		fresh = true
	}
}

// written is what put wrote: the record's version, whether it was a
// commit, whether also's writes went with it (with), and must's writes
// and their versions.
type written[T any] struct {
	v        storage.Version
	commit   bool
	with     bool
	must     []storage.Write
	mustVers []storage.Version
	// b is the record's bytes as sent, nil when nothing was (must or
	// the encoding failed); stored is the copy Trim shaped, written in
	// place of the document, or nil when the document was.
	b      []byte
	stored *T
}

// storedDoc is the document as written: the trimmed copy, if any, else doc.
func (w *written[T]) storedDoc(doc T) T {
	if w.stored != nil {
		return *w.stored
	}
	return doc
}

// put writes doc, encoded, under IfMatch of the version last read or
// written: one Put, or, when must or also give writes, one commit of the
// record's write first, then must's, then also's (also failing, the
// record's write goes without them; must failing, nothing is written).
// With also's writes, the record written is Trim's copy of doc.
func (r *Record[T, P]) put(ctx context.Context, doc P, must, also func(P) ([]storage.Write, error)) (w written[T], err error) {
	if must != nil {
		if w.must, err = must(doc); err != nil {
			return w, err
		}
	}
	var more []storage.Write
	if also != nil {
		more, _ = also(doc) // writes it cannot make are the caller's to make apart, as without a commit
	}
	if len(more) > 0 && r.Trim != nil {
		t := r.clone(doc)
		r.Trim(&t)
		w.stored, doc = &t, &t
	}
	b, err := records.Encode[T, P](doc)
	if err != nil {
		return w, fmt.Errorf("conveyor: encode %s: %w", r.Key, err)
	}
	w.b = b
	if len(w.must)+len(more) == 0 {
		w.v, err = r.Store.Put(ctx, r.Key, b, storage.IfMatch(r.ver))
		return w, err
	}
	ws := make([]storage.Write, 0, 1+len(w.must)+len(more))
	ws = append(append(append(ws, storage.Write{Key: r.Key, Value: b, Cond: storage.IfMatch(r.ver)}), w.must...), more...)
	w.commit, w.with = true, len(more) > 0
	vs, err := r.Store.Commit(ctx, ws)
	if err != nil {
		return w, err
	}
	w.v, w.mustVers = vs[0], vs[1:1+len(w.must)]
	return w, nil
}

// readBack is the versions of ws (a commit's, landed with an unknown
// outcome): each Put's key read, its version if it still holds the bytes
// written, else "".
func (r *Record[T, P]) readBack(ctx context.Context, ws []storage.Write) []storage.Version {
	if len(ws) == 0 {
		return nil
	}
	vs := make([]storage.Version, len(ws))
	for i, w := range ws {
		if w.Delete {
			continue
		}
		if got, gv, err := r.Store.Get(ctx, w.Key); err == nil && bytes.Equal(got, w.Value) {
			vs[i] = gv
		}
	}
	return vs
}

// failedAtAny tells whether err is a refused condition of one of ws.
func failedAtAny(err error, ws []storage.Write) bool {
	for _, w := range ws {
		if failedAt(err, w.Key) {
			return true
		}
	}
	return false
}

// failedAt tells whether err is a refused condition of the write at key.
func failedAt(err error, key string) bool {
	oe, ok := errors.AsType[*storage.OpError](err)
	return ok && errors.Is(err, storage.ErrPreconditionFailed) && oe.Key == key
}

// Create writes doc at the key, create-only, with its counter set to 1,
// and caches it. An existing key gives ErrPreconditionFailed.
func (r *Record[T, P]) Create(ctx context.Context, doc T) (storage.Version, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := P(&doc).StorageMeta()
	m.Version, m.Unknown = 1, "" // a record created holds only what this release writes
	b, err := jsonenc.Marshal(P(&doc))
	if err != nil {
		return "", fmt.Errorf("conveyor: encode %s: %w", r.Key, err)
	}
	v, err := r.Store.Put(ctx, r.Key, b, storage.IfNotExists())
	if errors.Is(err, storage.ErrOutcomeUnknown) {
		if got, gv, gerr := r.Store.Get(ctx, r.Key); gerr == nil && bytes.Equal(got, b) {
			v, err = gv, nil
		}
	}
	if err != nil {
		return "", err
	}
	r.doc, r.ver, r.cached, r.fresh = doc, v, true, false
	return v, nil
}
