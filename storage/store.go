// Package storage defines the Store contract every state change in Conveyor
// goes through: Get, Put and Delete with conditions, List and Watch by
// prefix, versions, ids and keys, and the errors every adapter reports the
// same way. What is stored on it is package storage/records (documents,
// audit, quarantine, leases), at the keys of docs/spec.md#key-layout.
//
// A Store is a flat map from keys to byte values with conditional writes.
// Its promises (read-after-write, create-once, compare-and-swap linearizable
// per key) are what make the single status writer, lease fencing and
// create-once artifacts true, so every adapter is proven against the same
// conformance suite, package storage/storetest.
package storage

import (
	"context"
	"iter"
	"strings"
)

// Version identifies the state one write left at one key. It is opaque:
// callers compare versions only for equality and pass them back in IfMatch.
//
// Every adapter guarantees: two versions of one key are equal only if they
// were issued for equal bytes. So IfMatch(v) succeeds only while the key
// holds the very bytes v was returned with (by Get or Put); once other
// bytes replace them, v fails, at least until those exact bytes are back.
//
// memstore and filestore guarantee more: every successful write gets a
// version never issued before for that key, even when it writes the bytes
// already stored, so a stale version can never match again (no ABA).
// s3store cannot: the object's bytes are exactly the value and its version
// is the ETag, the MD5 of those bytes, so rewriting identical bytes, at
// once or after A-B-A, brings the earlier version back, and a
// compare-and-swap holding it succeeds. Such a swap acts on exactly the
// bytes it was computed from, so it is correct whenever a record's state is
// its bytes; what it cannot do is notice that identical bytes were
// rewritten in between. A caller that must notice every write makes every
// write change the bytes: typed documents do (Meta's counter goes up on
// every Update); a raw object under compare-and-swap carries an epoch or
// counter of its own. (storetest checks the weaker guarantee for adapters
// that declare storetest.ContentVersions.)
type Version string

// ConditionKind says which precondition a Condition carries.
type ConditionKind uint8

const (
	// Unconditional writes or deletes whatever is stored.
	Unconditional ConditionKind = iota
	// CreateOnly succeeds only if the key does not exist (If-None-Match: *).
	CreateOnly
	// MatchVersion succeeds only if the key exists and its current version
	// equals the given one (If-Match).
	MatchVersion
)

// Condition is the precondition of a Put or Delete. The zero value is
// unconditional. Build others with IfNotExists and IfMatch.
type Condition struct {
	kind    ConditionKind
	version Version
}

// IfNotExists makes a Put create-only: it fails with ErrPreconditionFailed
// when the key already exists.
func IfNotExists() Condition { return Condition{kind: CreateOnly} }

// IfMatch makes a Put or Delete succeed only while the key's current version
// is v. A missing key fails the condition (ErrPreconditionFailed), never
// ErrNotFound, so a compare-and-swap loop has one error to handle.
func IfMatch(v Version) Condition { return Condition{kind: MatchVersion, version: v} }

// Kind reports which precondition c carries.
func (c Condition) Kind() ConditionKind { return c.kind }

// Version is the version an IfMatch condition expects; empty otherwise.
func (c Condition) Version() Version { return c.version }

// Holds tells whether c allows a write over a key whose current version is
// current ("" when the key is missing): the one statement of the conditions'
// meaning that adapters deciding locally share.
func (c Condition) Holds(current Version) bool {
	switch c.kind {
	case CreateOnly:
		return current == ""
	case MatchVersion:
		return current != "" && current == c.version
	default:
		return true
	}
}

// String renders c for error messages and logs.
func (c Condition) String() string {
	switch c.kind {
	case CreateOnly:
		return "if-not-exists"
	case MatchVersion:
		return "if-match(" + string(c.version) + ")"
	default:
		return "unconditional"
	}
}

// Store is the contract every storage adapter meets. All methods take the
// context first and honour its cancellation: a call whose context is done
// before it starts returns an error matching ctx.Err() and does nothing.
//
// Keys are checked with ValidateKey before any I/O; an invalid key gives an
// error matching ErrInvalidKey. Keys are "/"-separated paths, and like file
// paths a key must not also be the "directory" of other keys: storing both
// "a" and "a/b" is undefined (MinIO and file systems cannot hold an object
// and a folder of one name). The key layout of this package never does it. Errors match the package's sentinels with
// errors.Is, and an adapter's native error (an AWS API error, an *os.PathError)
// stays reachable with errors.As through *OpError.
//
// All methods are safe for concurrent use. Operations on one key are
// linearizable: each takes effect atomically at some instant between its call
// and its return, and reads see the latest completed write.
type Store interface {
	// Get returns the value stored at key and its current version. A missing
	// key gives an error matching ErrNotFound. The returned slice belongs to
	// the caller.
	Get(ctx context.Context, key string) ([]byte, Version, error)

	// Put stores value at key if cond holds and returns the new version
	// (new as Version explains: always, but for a content-versioned adapter
	// rewriting bytes the key held before). A failed condition
	// gives an error matching ErrPreconditionFailed and writes nothing:
	// IfNotExists fails when the key exists, IfMatch fails when the key is
	// missing or has another version. The store does not keep value after
	// Put returns. Values of any size the backend allows (at least 5 MiB)
	// are accepted, including empty ones. An adapter that cannot tell
	// whether a conditional write landed (a lost response, then another
	// writer) returns an error matching ErrOutcomeUnknown, never a false
	// success or a false ErrPreconditionFailed.
	Put(ctx context.Context, key string, value []byte, cond Condition) (Version, error)

	// Delete removes key if cond holds. Unconditional Delete of a missing key
	// succeeds (deletes are idempotent). IfMatch fails with
	// ErrPreconditionFailed when the key is missing or has another version.
	// IfNotExists is meaningless for Delete and gives ErrInvalidCondition.
	//
	// A conditional Delete is atomic on memstore, filestore and AWS S3, but
	// NOT on MinIO, which ignores If-Match on DeleteObject: s3store checks
	// the version with a HEAD and then deletes, so a write landing between
	// the two is deleted too. Nothing may therefore rely on a conditional
	// Delete for mutual exclusion. Use it only on records nobody writes any
	// more (a finalized artifact, an expired inbox entry), where the
	// condition catches a mistake, not a race; to retire a record others may
	// still write, first move it with a compare-and-swap Put to a state no
	// writer changes, then delete it.
	Delete(ctx context.Context, key string, cond Condition) error

	// List yields, in ascending byte order, every key that starts with prefix
	// (a plain string prefix, not necessarily ending in "/"; "" lists all).
	// It hides pagination: iteration continues past any backend page size.
	// Keys written or deleted during iteration may or may not appear. An
	// error is yielded once, with an empty key, and ends the iteration; a
	// prefix that can never start a valid key yields an error matching
	// ErrInvalidKey.
	List(ctx context.Context, prefix string) iter.Seq2[string, error]

	// ListAfter is List from a cursor: it yields, in ascending byte order,
	// the keys that start with prefix and sort strictly after after, with
	// List's other promises (hidden pagination, one error ends it,
	// ErrInvalidKey for a prefix that can never start a key). after is
	// usually a key an earlier listing yielded, but need not be stored: ""
	// lists from the start, as List does; an after that sorts before prefix
	// (and every key with it) lists them all; one that sorts after every key
	// with the prefix yields nothing. after must be "" or a string
	// ValidatePrefix accepts (an error matching ErrInvalidKey otherwise).
	//
	// Its cost follows what it yields, not what it skips: memstore seeks
	// its sorted index and s3store passes after as ListObjectsV2's
	// StartAfter (one request per page yielded; single-drive MinIO still
	// walks the folder on disk to serve it). filestore skips every
	// directory whose keys all sort before after without opening it; the
	// directories on after's own path (its parent and their parents) it
	// reads whole, n names for a cursor inside a directory of n entries,
	// except on Linux, where a directory of 1,000 entries or more is then
	// indexed (sorted names kept exact with inotify, a few directories per
	// Store) and the next listings seek in it.
	ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error]
}

// ListStart reduces the cursor of a ListAfter(prefix, after) to what an
// adapter must do: start is "" when every key with prefix sorts after after
// (list them all), else after itself; none is true when no key with prefix
// can sort after after (yield nothing). Adapters call it after CheckAfter.
func ListStart(prefix, after string) (start string, none bool) {
	switch {
	case after < prefix:
		return "", false
	case strings.HasPrefix(after, prefix):
		return after, false
	default: // after > prefix and does not start with it: past every such key
		return "", true
	}
}
