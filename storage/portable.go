package storage

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Store is the storage every state change in Conveyor goes through: the
// portable layer over one adapter's driver (package storage/driver), built
// with New, and returned by the adapters' constructors (memstore.New,
// filestore.New, s3store.New). All methods take the context first and
// honour its cancellation: a call whose context is done before it starts
// returns an error matching ctx.Err() and does nothing.
//
// Keys are checked before any I/O; an invalid key gives an
// error matching ErrInvalidKey. Keys are "/"-separated paths, and like file
// paths a key must not also be the "directory" of other keys: storing both
// "a" and "a/b" is undefined (MinIO and file systems cannot hold an object
// and a folder of one name). The key layout of this package never does it.
// Every failure is an *OpError matching the package's sentinels with
// errors.Is, and an adapter's native error (an AWS API error, an
// *os.PathError) stays reachable with errors.As through it.
//
// All methods are safe for concurrent use. Operations on one key are
// linearizable: each takes effect atomically at some instant between its call
// and its return, and reads see the latest completed write.
//
// A *Store is itself a driver.Store, so a test wrapper can wrap one (a
// fault store over a memstore) and be wrapped by New in turn.
type Store struct {
	d driver.Store
}

var (
	_ driver.Store     = (*Store)(nil)
	_ driver.Unwrapper = (*Store)(nil)
)

// New returns the portable Store over d.
func New(d driver.Store) *Store { return &Store{d: d} }

// Get returns the value stored at key and its current version. A missing
// key gives an error matching ErrNotFound. The returned slice belongs to
// the caller.
func (s *Store) Get(ctx context.Context, key string) ([]byte, Version, error) {
	if err := checkOp(ctx, "get", key); err != nil {
		return nil, "", err
	}
	b, v, err := s.d.Get(ctx, key)
	if err != nil {
		return nil, "", wrap("get", key, err)
	}
	return b, v, nil
}

// Put stores value at key if cond holds and returns the new version (new
// as Version explains: always, but for a content-versioned adapter
// rewriting bytes the key held before). A failed condition gives an error
// matching ErrPreconditionFailed and writes nothing: IfNotExists fails when
// the key exists, IfMatch fails when the key is missing or has another
// version. The store does not keep value after Put returns. Values of any
// size the backend allows (at least 5 MiB) are accepted, including empty
// ones. An adapter that cannot tell whether a conditional write landed (a
// lost response, then another writer) returns an error matching
// ErrOutcomeUnknown, never a false success or a false
// ErrPreconditionFailed.
func (s *Store) Put(ctx context.Context, key string, value []byte, cond Condition) (Version, error) {
	if err := checkOp(ctx, "put", key); err != nil {
		return "", err
	}
	if err := checkCondition("put", key, cond); err != nil {
		return "", err
	}
	v, err := s.d.Put(ctx, key, value, cond)
	if err != nil {
		return "", wrap("put", key, err)
	}
	return v, nil
}

// Delete removes key if cond holds. driver.Unconditional Delete of a missing key
// succeeds (deletes are idempotent). IfMatch fails with
// ErrPreconditionFailed when the key is missing or has another version.
// IfNotExists is meaningless for Delete and gives ErrInvalidCondition.
//
// A conditional Delete is atomic on memstore, filestore and AWS S3, but NOT
// on MinIO, which ignores If-Match on DeleteObject: s3store checks the
// version with a HEAD and then deletes, so a write landing between the two
// is deleted too (AtomicConditionalDelete reports it). Nothing may
// therefore rely on a conditional Delete for mutual exclusion. Use it only
// on records nobody writes any more (a finalized artifact, an expired inbox
// entry), where the condition catches a mistake, not a race; to retire a
// record others may still write, first move it with a compare-and-swap Put
// to a state no writer changes, then delete it.
func (s *Store) Delete(ctx context.Context, key string, cond Condition) error {
	if err := checkOp(ctx, "delete", key); err != nil {
		return err
	}
	if err := checkCondition("delete", key, cond); err != nil {
		return err
	}
	return wrap("delete", key, s.d.Delete(ctx, key, cond))
}

// List yields, in ascending byte order, every key that starts with prefix
// (a plain string prefix, not necessarily ending in "/"; "" lists all). It
// hides pagination: iteration continues past any backend page size. Keys
// written or deleted during iteration may or may not appear. An error is
// yielded once, with an empty key, and ends the iteration; a prefix that
// can never start a valid key yields an error matching ErrInvalidKey.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return s.ListAfter(ctx, prefix, "")
}

// ListAfter is List from a cursor: it yields, in ascending byte order, the
// keys that start with prefix and sort strictly after after, with List's
// other promises (hidden pagination, one error ends it, ErrInvalidKey for a
// prefix that can never start a key). after is usually a key an earlier
// listing yielded, but need not be stored: "" lists from the start, as List
// does; an after that sorts before prefix (and every key with it) lists
// them all; one that sorts after every key with the prefix yields nothing.
// after must be "" or a string that can start a valid key (an error matching
// ErrInvalidKey otherwise).
//
// Its cost follows what it yields, not what it skips: memstore seeks its
// sorted index and s3store passes after as ListObjectsV2's StartAfter (one
// request per page yielded; single-drive MinIO still walks the folder on
// disk to serve it). filestore skips every directory whose keys all sort
// before after without opening it; the directories on after's own path
// (its parent and their parents) it reads whole, n names for a cursor
// inside a directory of n entries, except on Linux, where a directory of
// 1,000 entries or more is then indexed (sorted names kept exact with
// inotify, a few directories per Store) and the next listings seek in it.
func (s *Store) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := checkAfter(ctx, prefix, after); err != nil {
			yield("", err)
			return
		}
		start, none := storekey.ListStart(prefix, after)
		if none {
			return
		}
		for k, err := range s.d.ListAfter(ctx, prefix, start) {
			if err != nil {
				yield("", wrap("list", prefix, err))
				return
			}
			if !yield(k, nil) {
				return
			}
		}
	}
}

// Watch starts watching the keys that start with prefix (a plain string
// prefix, as for List; "" watches every key) and returns a channel that
// receives a value when one of them may have changed, so that a worker
// waiting for new work wakes when it is written instead of at its next
// poll. A notification is only a hint: callers keep polling as the
// fallback (at a slower pace), and read the store to learn what changed.
// The contract:
//
//   - Every Put or Delete of a key under prefix that completes after Watch
//     has returned, by this Store or (where the adapter says so) by another
//     process or Store on the same backend, is followed by a receivable
//     value on the channel, promptly (the adapter documents how promptly).
//     Changes made before Watch returned may or may not be signalled.
//   - Signals coalesce: the channel has a buffer of one, and a change that
//     finds it full adds nothing. One receive can stand for many changes,
//     so a receiver re-reads everything it cares about after each one.
//   - Spurious signals are allowed (a change outside prefix, a write that
//     failed its condition, a lost event the adapter answers with a signal);
//     missed ones are not, while the channel is open.
//   - A watcher never blocks a writer: a channel nobody receives from
//     holds up no Put or Delete, and signalling costs a writer at most a
//     constant per watcher.
//   - When ctx is done the channel is closed, and every resource the watch
//     held (goroutines, descriptors) is released by the time the close is
//     received. The channel may also close earlier when the adapter can no
//     longer keep the watch (an exhausted kernel limit); the caller then
//     relies on polling, and may call Watch again.
//
// Watch checks prefix as List does (an invalid one gives an error matching
// ErrInvalidKey) and fails, without watching, with an error matching
// ctx.Err() when ctx is already done, or with one matching
// errors.ErrUnsupported where the adapter cannot watch (memstore and
// filestore on Linux can; s3store cannot); any error means: poll. The
// store does not poll on the caller's behalf: each caller polls at the
// pace its own work allows.
func (s *Store) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	if err := checkWatch(ctx, prefix); err != nil {
		return nil, err
	}
	w, ok := s.d.(driver.Watcher)
	if !ok {
		return nil, newOpError("watch", prefix, errors.ErrUnsupported, nil)
	}
	ch, err := w.Watch(ctx, prefix)
	if err != nil {
		return nil, wrap("watch", prefix, err)
	}
	return ch, nil
}

// SettleTime is how long the store may answer wrongly after a disturbance:
// a distributed store such as a MinIO cluster, where for up to that long
// after a node stops or restarts, or a writer is killed mid-request, a read
// of an existing key may answer not found, and a create-only Put may be
// accepted over an existing key. Outside those windows the Store's
// promises hold as written.
//
// Engines use it for the decisions they cannot undo: a key read as missing
// is believed only when a read at least SettleTime later still finds
// nothing, and an ownership that rests on a create-only write is checked
// again after SettleTime. A store that settles at once (memstore,
// filestore, a single-drive MinIO) answers 0, and those checks cost
// nothing.
// A nil Store settles at once.
func (s *Store) SettleTime() time.Duration {
	if s == nil {
		return 0
	}
	return settleTime(s.d)
}

// AtomicConditionalDelete tells whether a conditional Delete on the store
// is atomic (see Delete).
func (s *Store) AtomicConditionalDelete() bool { return atomicConditionalDelete(s.d) }

// Unwrap returns the driver under the Store (driver.Unwrapper), so a
// wrapper's capabilities are found through it.
func (s *Store) Unwrap() driver.Store { return s.d }

// Close releases what the driver holds (filestore's directory watches),
// when it holds anything; the Store is not used after.
func (s *Store) Close() error {
	if c, ok := s.d.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// kinds are the errors a driver reports an outcome with, in the order they
// are looked for.
var kinds = []error{ErrNotFound, ErrPreconditionFailed, ErrOutcomeUnknown, context.Canceled, context.DeadlineExceeded}

// wrap makes err, a driver's, an *OpError of op on key: one already is (or
// wraps one) is returned as it is; a bare sentinel or context error becomes
// the kind; one that wraps a sentinel is the cause of that kind; anything
// else is final, so it is the kind (driver.Store's Errors says why).
func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*OpError](err); ok {
		return err
	}
	for _, k := range kinds {
		if err == k {
			return newOpError(op, key, k, nil)
		}
	}
	for _, k := range kinds {
		if errors.Is(err, k) {
			return newOpError(op, key, k, err)
		}
	}
	return newOpError(op, key, err, nil)
}

// settleTime is the Settle of the first driver.Settler found on d or the
// drivers it wraps, 0 when there is none.
func settleTime(d driver.Store) time.Duration {
	for i := 0; d != nil && i < 16; i++ { // bounded: a wrapper cycle is a bug, not a hang
		if st, ok := d.(driver.Settler); ok {
			return st.Settle()
		}
		u, ok := d.(driver.Unwrapper)
		if !ok {
			return 0
		}
		d = u.Unwrap()
	}
	return 0
}

// atomicConditionalDelete tells whether a conditional Delete on d is
// atomic: what the first driver.AtomicityReporter found on d or the
// drivers it wraps says, true when there is none.
func atomicConditionalDelete(d driver.Store) bool {
	for i := 0; d != nil && i < 16; i++ {
		if r, ok := d.(driver.AtomicityReporter); ok {
			return r.AtomicConditionalDelete()
		}
		u, ok := d.(driver.Unwrapper)
		if !ok {
			return true
		}
		d = u.Unwrap()
	}
	return true
}
