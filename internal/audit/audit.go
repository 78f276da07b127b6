// Package audit writes the audit of a state write, one mechanism for
// every engine (the job queue's segments, the Runner's status writes): the
// record carries the audit object of its last write (or the moves not yet
// flushed), under a key derived from the record and its version
// (lifecycle.AuditEventID with a subject), so every writer that writes it
// writes the same object once. The writer writes it after its state write
// with a budget of its own (Context); should that fail, the next writer of
// the record, or the sweep, finds it missing and writes it (Ensure) before
// going on.
package audit

import (
	"context"
	"errors"
	"time"

	"github.com/runconveyor/conveyor/storage"
)

// Put writes an audit object create-only; one already there (another
// writer's copy of the same object) is success. A write whose outcome the
// store could not tell (a node stopping mid-request) is settled by a read,
// and written again if the object is not there: its bytes are the same
// whoever writes them, so a second create changes nothing.
func Put(ctx context.Context, s *storage.Store, key string, b []byte) error {
	var err error
	for range maxAuditTries {
		_, err = s.Put(ctx, key, b, storage.IfNotExists())
		switch {
		case err == nil, errors.Is(err, storage.ErrPreconditionFailed):
			return nil // the object is there, whoever wrote it
		case !errors.Is(err, storage.ErrOutcomeUnknown) || errors.Is(err, storage.ErrUnavailable) || ctx.Err() != nil:
			return err
		}
		if _, _, gerr := s.Get(ctx, key); gerr == nil {
			return nil
		} else if !errors.Is(gerr, storage.ErrNotFound) {
			return errors.Join(err, gerr)
		}
	}
	return err
}

// maxAuditTries bounds Put's writes of one object whose outcomes stay
// unknown; the record keeps the event, and its next writer or the sweep
// writes it (Ensure).
const maxAuditTries = 4

// Ensure makes sure the audit object at key exists: found, or written
// now (create-only).
func Ensure(ctx context.Context, s *storage.Store, key string, b []byte) error {
	if _, _, err := s.Get(ctx, key); err == nil {
		return nil
	} else if !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	return Put(ctx, s, key, b)
}

// Context is the context of the audit write that follows a state
// write: it keeps ctx's values but not its deadline or cancellation, and
// has budget of its own, so the audit of a write that happened is not
// dropped because the request that made it ran out of time.
func Context(ctx context.Context, budget time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), budget)
}
