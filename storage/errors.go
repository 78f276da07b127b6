package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Sentinel errors. Match them with errors.Is; every failure of a Store is
// an *OpError wrapping one of them, a context error, or the adapter's own.
// A driver (package storage/driver) reports ErrNotFound,
// ErrPreconditionFailed and ErrOutcomeUnknown.
var (
	// ErrNotFound: the key does not exist.
	// It is the SDK's one not-found sentinel, lifecycle.ErrNotFound, so a
	// caller matches it without importing the store.
	ErrNotFound = lifecycle.ErrNotFound
	// ErrPreconditionFailed: the Condition of a Put or Delete did not hold,
	// so nothing was written. A compare-and-swap loop re-reads and retries.
	ErrPreconditionFailed = errors.New("storage: precondition failed")
	// ErrInvalidKey: the key (or List prefix) cannot be stored: empty,
	// too long, not a clean relative "/"-separated path of valid UTF-8
	// without control characters or backslashes, or a segment starting
	// with the ".cnv" adapters keep for themselves.
	ErrInvalidKey = storekey.ErrInvalidKey
	// ErrInvalidID: an id (a run id, a slug, an idempotency key) is not 1
	// to 128 bytes of [A-Za-z0-9._:-] without "..", or starts with ".".
	// It matches lifecycle.ErrInvalidInput too: an id is a caller's input.
	ErrInvalidID = storekey.ErrInvalidID
	// ErrOutcomeUnknown: a conditional write may or may not have been
	// applied (its response was lost and the store cannot tell whether it
	// landed). Re-read before acting; do not blindly retry a change that
	// must happen once.
	ErrOutcomeUnknown = errors.New("storage: outcome unknown")
	// ErrInvalidCondition: the condition makes no sense for the operation
	// (IfNotExists on Delete, IfMatch with an empty version).
	ErrInvalidCondition = errors.New("storage: invalid condition")
)

// OpError describes a failed Store operation (driver.OpError): a kind (a
// sentinel of this package or a context error) and the adapter's native
// error, so errors.Is(err, ErrNotFound) and errors.As(err, &awsErr) both
// work.
type OpError = driver.OpError

// newOpError builds an *OpError.
func newOpError(op, key string, kind, cause error) *OpError {
	return &OpError{Op: op, Key: key, Kind: kind, Cause: cause}
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

// checkKey validates key for op and returns an *OpError wrapping the
// key's refusal (so it matches ErrInvalidKey). The Store calls it before any
// I/O.
func checkKey(op, key string) error {
	if err := storekey.ValidateKey(key); err != nil {
		return newOpError(op, key, nil, err)
	}
	return nil
}

// checkOp is what the Store checks before any I/O of op on key: the key
// is valid (checkKey) and ctx is not done (an *OpError matching ctx.Err()).
func checkOp(ctx context.Context, op, key string) error {
	if err := checkKey(op, key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return newOpError(op, key, err, nil)
	}
	return nil
}

// checkAfter is what the Store checks before listing prefix from after:
// the prefix can start a valid key, ctx is not done, and it refuses an after that
// is neither "" nor a string that can start a valid key. The Store calls it
// before any I/O.
func checkAfter(ctx context.Context, prefix, after string) error {
	if err := storekey.ValidatePrefix(prefix); err != nil {
		return newOpError("list", prefix, nil, err)
	}
	if err := storekey.ValidatePrefix(after); err != nil {
		return newOpError("list", after, nil, err)
	}
	if err := ctx.Err(); err != nil {
		return newOpError("list", prefix, err, nil)
	}
	return nil
}

// checkCondition reports whether cond is valid for op ("put" or "delete").
// The Store calls it before any I/O.
func checkCondition(op, key string, cond Condition) error {
	switch cond.Kind() {
	case driver.Unconditional:
		return nil
	case driver.CreateOnly:
		if op == "delete" {
			return newOpError(op, key, ErrInvalidCondition, errors.New("if-not-exists cannot guard a delete"))
		}
		return nil
	case driver.MatchVersion:
		if cond.Version() == "" {
			return newOpError(op, key, ErrInvalidCondition, errors.New("if-match with an empty version"))
		}
		return nil
	default:
		return newOpError(op, key, ErrInvalidCondition, fmt.Errorf("unknown condition kind %d", cond.Kind()))
	}
}

// ErrUnavailable is matched by the error of a call that met only transient
// failures of the store (timeouts, 5xx, refused connections) until its
// context ended: the store was unreachable for as long as the caller could
// wait. Its code is UPSTREAM_UNAVAILABLE. It is lifecycle.ErrUnavailable,
// so a caller matches it without the store.
var ErrUnavailable = lifecycle.ErrUnavailable

// UnavailableError is a call that gave up on a store that kept failing.
type UnavailableError struct {
	Op, Key string
	// Waited is how long the call kept retrying.
	Waited time.Duration
	// Err is the last failure; Stop what ended the wait (the context's
	// error, or nil when the retry schedule itself gave up).
	Err, Stop error
}

// Error names the call, how long it waited and the last failure.
func (e *UnavailableError) Error() string {
	return fmt.Sprintf("storage: %s %s: store unavailable for %s: %s", e.Op, e.Key, e.Waited, trimPrefix(e.Err.Error()))
}

// Is matches ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the last failure and what ended the wait.
func (e *UnavailableError) Unwrap() []error {
	if e.Stop == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Stop}
}

// Transient tells whether err is a store failure worth waiting out: an
// adapter's native error that an outage causes (a timeout, a refused or
// broken connection, an I/O error, an HTTP 5xx, 429 or 408) rather than an
// answer (not found, precondition failed, invalid key or id, a context
// ending) or a refusal that waiting cannot mend (a permission denied, a
// read-only file system, a name too long, an HTTP 4xx such as 403
// AccessDenied or a missing bucket). Engines retry transient errors with
// backoff within the deadline of the unit they serve.
func Transient(err error) bool {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return false // already waited out by the one who gave up
	}
	var oe *OpError
	if !errors.As(err, &oe) || oe.Kind != nil || oe.Cause == nil {
		return false
	}
	c := oe.Cause
	switch {
	case errors.Is(c, context.Canceled), errors.Is(c, context.DeadlineExceeded),
		errors.Is(c, ErrInvalidKey), errors.Is(c, ErrInvalidID), errors.Is(c, ErrInvalidCondition),
		errors.Is(c, fs.ErrPermission), errors.Is(c, syscall.EROFS), errors.Is(c, syscall.ENAMETOOLONG),
		errors.Is(c, syscall.ENOTDIR), errors.Is(c, syscall.EISDIR), errors.Is(c, syscall.EINVAL):
		return false
	}
	// An HTTP answer (the AWS SDK's response errors have this method): only
	// the server's trouble and throttling pass with time, and 499, which a
	// stopping MinIO node answers (ClientDisconnected) for the requests it
	// drops. (Status 0 is no answer at all: the request never got one, as
	// when the connection is refused.)
	var hs interface{ HTTPStatusCode() int }
	if errors.As(c, &hs) && hs.HTTPStatusCode() != 0 {
		code := hs.HTTPStatusCode()
		return code >= 500 || code == 429 || code == 408 || code == 499
	}
	return true
}
