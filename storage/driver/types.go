package driver

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
// that declare storetest.Capabilities.ContentVersions.)
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

// IfNotExists makes a Put create-only: it fails with storage.ErrPreconditionFailed
// when the key already exists.
func IfNotExists() Condition { return Condition{kind: CreateOnly} }

// IfMatch makes a Put or Delete succeed only while the key's current version
// is v. A missing key fails the condition (storage.ErrPreconditionFailed), never
// storage.ErrNotFound, so a compare-and-swap loop has one error to handle.
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

// OpError describes a failed Store operation. It wraps both a kind (a
// sentinel of package storage, or a context error) and the adapter's native error, so
// errors.Is(err, storage.ErrNotFound) and errors.As(err, &awsErr) both work.
type OpError struct {
	Op    string // "get", "put", "delete", "list", "watch"
	Key   string // the key or List prefix
	Kind  error  // a sentinel, a context error, or nil
	Cause error  // the adapter's native error, or nil
}

// Error renders "storage: put agents/x/status.json: precondition failed: <cause>".
func (e *OpError) Error() string {
	msg := "storage: " + e.Op + " " + e.Key
	if e.Kind != nil {
		msg += ": " + trimPrefix(e.Kind.Error())
	}
	if e.Cause != nil {
		msg += ": " + trimPrefix(e.Cause.Error())
	}
	return msg
}

// Unwrap returns the kind and the cause, whichever are set.
func (e *OpError) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// trimPrefix drops the "storage: " every error of this package starts
// with, so a message nesting one reads once.
func trimPrefix(s string) string {
	const p = "storage: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
