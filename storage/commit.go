package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/storage/driver"
)

// Write is one write of a Commit: a Put of Value at Key under Cond or, with
// Delete set, a Delete of Key under Cond.
type Write = driver.Write

// MaxCommit is the most writes one Commit carries.
const MaxCommit = driver.MaxCommit

// CanCommit tells whether the store applies several writes as one (Commit).
// SQLite and memstore do; filestore and S3 do not, and a caller writes one
// key at a time there. A wrapper (a test's fault or counting store, a
// patient Store) commits only what the store under it can.
func (s *Store) CanCommit() bool { return canCommit(s.d) }

// canCommit tells whether d is a driver.Committer and, when it wraps
// another (driver.Unwrapper), so is everything under it: a wrapper's
// Commit forwards, so it cannot promise more than what it wraps (a
// counting wrapper over filestore has a Commit method and no way to
// keep it).
func canCommit(d driver.Store) bool {
	for i := 0; d != nil && i < 16; i++ { // bounded: a wrapper cycle is a bug, not a hang
		if _, ok := d.(driver.Committer); !ok {
			return false
		}
		u, ok := d.(driver.Unwrapper)
		if !ok {
			return true
		}
		d = u.Unwrap()
	}
	return false
}

// Commit applies writes as one: if every write's condition holds, all land
// at one instant and Commit returns their new versions in order (a
// Delete's is ""); otherwise nothing is written and the error matches
// ErrPreconditionFailed, its *OpError's Key naming the first write whose
// condition failed. ErrOutcomeUnknown means all landed or none did, never
// some.
//
// Each write is checked as Put and Delete check theirs; a key may appear
// once; there are 1 to MaxCommit writes (more give ErrInvalidCondition).
// On a store that cannot commit several keys at once (CanCommit false),
// Commit writes nothing and fails with an error matching
// errors.ErrUnsupported.
func (s *Store) Commit(ctx context.Context, writes []Write) ([]Version, error) {
	c, ok := s.d.(driver.Committer)
	if !ok || !canCommit(s.d) {
		return nil, newOpError("commit", "", errors.ErrUnsupported, nil)
	}
	if n := len(writes); n == 0 || n > MaxCommit {
		return nil, newOpError("commit", "", ErrInvalidCondition,
			fmt.Errorf("%d writes: a commit carries 1 to %d", n, MaxCommit))
	}
	seen := make(map[string]struct{}, len(writes))
	for _, w := range writes {
		op := "put"
		if w.Delete {
			op = "delete"
		}
		if err := checkOp(ctx, op, w.Key); err != nil {
			return nil, err
		}
		if err := checkCondition(op, w.Key, w.Cond); err != nil {
			return nil, err
		}
		if _, dup := seen[w.Key]; dup {
			return nil, newOpError("commit", w.Key, ErrInvalidCondition, errors.New("the key is written twice in one commit"))
		}
		seen[w.Key] = struct{}{}
	}
	vs, err := c.Commit(ctx, writes)
	if err != nil {
		return nil, wrap("commit", "", err)
	}
	return vs, nil
}

var (
	_ driver.Committer = (*Store)(nil)
	_ driver.Committer = (*patient)(nil)
)
