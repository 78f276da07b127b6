// Package driver is the narrow interface a storage adapter implements:
// Get, Put and Delete under a condition, and ListAfter, on one flat map from
// keys to byte values. Everything common to all adapters (key and condition
// checks, a done context refused before any I/O, List as ListAfter from the
// start, the *OpError every failure is reported as, retrying transient
// failures, finding the optional capabilities through wrappers) is written
// once above it, in the portable storage.Store that storage.New builds over
// a driver. Users never call a driver; adapters' constructors return the
// portable Store, and test wrappers (fault injection, counting) wrap a
// driver and are wrapped in turn by storage.New.
//
// The doc comments of this package are the contract a driver meets; package
// storage/storetest proves it against every adapter.
//
// # What the portable layer has already checked
//
// Before it calls a driver, the portable Store has checked that every key is
// valid (one that is not gives storage.ErrInvalidKey), that a prefix and a
// cursor can start a key, that a Condition makes sense for the operation
// (no IfNotExists on Delete, no IfMatch with an empty version), and that the
// context was not already done. A driver needs none of those checks; it
// must not rely on anything else (keys are not pre-split, the value may be
// nil).
//
// # Errors
//
// A driver reports the outcome of a call with these errors, matched with
// errors.Is, so that every adapter answers alike:
//
//   - storage.ErrNotFound: Get of a missing key.
//   - storage.ErrPreconditionFailed: a Put or Delete whose condition did not
//     hold; nothing was written.
//   - storage.ErrOutcomeUnknown: a conditional write that may or may not have
//     landed (its answer was lost and the driver cannot tell); never a false
//     success or a false storage.ErrPreconditionFailed in its place.
//   - an error matching ctx.Err(), when the context ended during the call.
//   - the backend's own failure (an *os.PathError, an AWS API error) as the
//     cause of an *OpError with no kind, &OpError{Op: op, Key: key, Cause: cause}:
//     storage.Transient judges such a cause, and the engines retry the
//     ones an outage causes (a timeout, a refused connection, a 5xx).
//
// A driver may return a sentinel bare, or an *OpError carrying a kind and
// its cause (&OpError{Op: op, Key: key, Kind: storage.ErrNotFound, Cause:
// cause}); the portable layer wraps what is not yet an *OpError, so callers always get one. Any other
// bare error is taken as final, an answer no retry can change: it becomes
// the *OpError's kind, and is never retried.
//
// # Optional capabilities
//
// A driver that can do more implements small interfaces besides Store,
// found by type assertion, and through wrappers by Unwrapper: Watcher
// (signal changes under a prefix), Settler (a bound on how long answers may
// be wrong after a disturbance), AtomicityReporter (whether a conditional
// Delete is atomic) and Committer (several writes as one, all or none). A
// capability added later is one more such interface: drivers without it,
// and callers that do not ask, are unaffected.
package driver

import (
	"context"
	"iter"
	"time"
)

// Store is what a storage adapter implements. All methods are safe for
// concurrent use, and operations on one key are linearizable: each takes
// effect atomically at some instant between its call and its return, and
// reads see the latest completed write.
type Store interface {
	// Get returns the value at key and its current version, or an error
	// matching storage.ErrNotFound. The returned slice belongs to the caller.
	Get(ctx context.Context, key string) ([]byte, Version, error)

	// Put stores value at key if cond holds (Condition.Holds states the
	// meaning) and returns the new version (see Version for what "new"
	// promises). A failed condition gives storage.ErrPreconditionFailed and writes
	// nothing. The driver does not keep value after Put returns; a nil or
	// empty value stores an empty value. Values of at least 5 MiB are
	// accepted. A conditional Put whose outcome the driver cannot learn
	// gives storage.ErrOutcomeUnknown.
	Put(ctx context.Context, key string, value []byte, cond Condition) (Version, error)

	// Delete removes key if cond holds (Unconditional or MatchVersion; the
	// portable layer refuses CreateOnly). An unconditional Delete of a
	// missing key succeeds; a MatchVersion Delete of a missing key, or of
	// one with another version, gives storage.ErrPreconditionFailed. A driver
	// whose conditional Delete checks and then deletes in two steps says
	// so with AtomicityReporter.
	Delete(ctx context.Context, key string, cond Condition) error

	// ListAfter yields, in ascending byte order and each once, the keys
	// that start with prefix and sort strictly after after; "" lists from
	// the start. The portable layer has reduced the cursor: after is ""
	// or itself starts with prefix, and a listing that can yield nothing
	// is never asked for. The driver hides its
	// backend's pages (it may read a page at a time, or iterate), and
	// stops reading when the consumer stops. Keys written or deleted
	// during the listing may or may not appear. A failure is yielded once,
	// with an empty key, and ends the listing; a context ending part-way is
	// such a failure. Its cost should follow what it yields, not what it
	// skips: a cursor is a seek, not a scan, where the backend allows.
	ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error]
}

// Watcher is a driver that can tell, within milliseconds, that keys under a
// prefix may have changed. The portable Store's Watch documents the promises
// (coalesced, never missed while open, never blocking a writer, closed when
// ctx ends); a driver's Watch keeps them. The prefix has been checked and
// the context was not done. An error means the caller polls; the driver
// returns one matching errors.ErrUnsupported where it cannot watch at all on
// this platform.
type Watcher interface {
	Watch(ctx context.Context, prefix string) (<-chan struct{}, error)
}

// Settler is a driver whose answers may be wrong for a bounded time after a
// disturbance (a distributed MinIO after a node restart: a read of an
// existing key answering not found, a create-only Put accepted over an
// existing key). Settle is that bound; a driver without Settler settles at
// once. It may change over the driver's life (a cluster detected after
// start).
type Settler interface {
	Settle() time.Duration
}

// AtomicityReporter is a driver that tells whether its conditional Delete
// is atomic. One that is not (s3store on MinIO, which ignores If-Match on
// DeleteObject and so checks the version first) deletes a write landing
// between its check and its delete. A driver without AtomicityReporter
// promises an atomic conditional Delete.
type AtomicityReporter interface {
	AtomicConditionalDelete() bool
}

// Unwrapper is a driver that wraps another (a fault-injecting or counting
// test wrapper, a retrying layer), so capabilities such as Settler are
// found through it. Watcher is not: a wrapper that forwards watches
// implements Watch itself, since a watch that bypasses the wrapper's
// faults would not be the wrapper's.
type Unwrapper interface {
	Unwrap() Store
}

// MaxCommit is the most writes one Commit may carry. It bounds the time a
// commit holds a backend's write lock and the memory a caller can ask a
// driver to stage; larger batches are split by the caller, each part its
// own all-or-nothing unit.
const MaxCommit = 1000

// Write is one write of a Commit: a Put of Value at Key under Cond or, with
// Delete set, a Delete of Key under Cond (Value ignored), with the meaning
// Store's Put and Delete give them.
type Write struct {
	Key    string
	Value  []byte
	Cond   Condition
	Delete bool
}

// Committer is a driver that applies several writes as one: either every
// write's condition holds and all of them land, at one instant, or none
// does. The portable layer has checked each write as Put and Delete check
// theirs, that no key appears twice and that there are 1 to MaxCommit
// writes.
//
// Commit returns one version per write, in order (a Delete's is ""). A
// condition that does not hold gives an *OpError whose Key is the first
// such write's and whose Kind is storage.ErrPreconditionFailed; nothing was
// written. storage.ErrOutcomeUnknown means all of the writes landed or none
// did, never some. Watchers are signalled for every key written, as for
// single writes.
//
// A wrapper (an Unwrapper) that implements Commit forwards it to what it
// wraps: the capability is the storage.Store's only where the wrapper and
// every driver under it are Committers. A wrapper without Commit hides the
// capability.
type Committer interface {
	Commit(ctx context.Context, writes []Write) ([]Version, error)
}
