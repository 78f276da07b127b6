package core

import (
	"context"
	"errors"
	"time"

	"github.com/runconveyor/conveyor/storage"
)

// The audit of a state write, one mechanism for every engine (the job
// queue's segments, the Runner's status writes): the record carries the
// audit object of its last write (or the moves not yet flushed), under a
// key derived from the record and its version (records.AuditEventID with a
// subject), so every writer that writes it writes the same object once.
// The writer writes it after its state write with a budget of its own
// (AuditContext); should that fail, the next writer of the record, or the
// sweep, finds it missing and writes it (EnsureAudit) before going on.

// PutAudit writes an audit object create-only; one already there (another
// writer's copy of the same object) is success.
func PutAudit(ctx context.Context, s storage.Store, key string, b []byte) error {
	_, err := s.Put(ctx, key, b, storage.IfNotExists())
	if errors.Is(err, storage.ErrPreconditionFailed) {
		return nil
	}
	return err
}

// EnsureAudit makes sure the audit object at key exists: found, or written
// now (create-only).
func EnsureAudit(ctx context.Context, s storage.Store, key string, b []byte) error {
	if _, _, err := s.Get(ctx, key); err == nil {
		return nil
	} else if !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	return PutAudit(ctx, s, key, b)
}

// AuditContext is the context of the audit write that follows a state
// write: it keeps ctx's values but not its deadline or cancellation, and
// has budget of its own, so the audit of a write that happened is not
// dropped because the request that made it ran out of time.
func AuditContext(ctx context.Context, budget time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), budget)
}
