package faultstore

import (
	"context"
	"errors"
	"slices"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

var _ driver.Committer = (*Store)(nil)

// Commit implements driver.Committer over a wrapped driver that commits
// (over one that does not, it fails with errors.ErrUnsupported, and the
// Store over the fault store cannot commit: storage.Store.CanCommit). Its
// faults keep a commit whole: an outage or FailNext refuses the commit
// before it reaches the wrapped driver, so a caller that cannot tell
// whether it landed finds that none of it did, never some; and a settling
// fault accepts a create-only write over an existing matching key as a
// create-only Put's does, by committing all of the writes with that one
// unconditional, so the commit lands whole or not at all. (A commit whose
// other writes then fail still counts the fault, which did not land.)
func (s *Store) Commit(ctx context.Context, writes []driver.Write) ([]storage.Version, error) {
	c, ok := s.Store.(driver.Committer)
	if !ok {
		return nil, &storage.OpError{Op: "commit", Kind: errors.ErrUnsupported}
	}
	key := ""
	if len(writes) > 0 {
		key = writes[0].Key
	}
	if err := s.refuse("commit", key); err != nil {
		return nil, err
	}
	if s.set.armed() {
		return s.settlingCommit(ctx, c, writes)
	}
	return c.Commit(ctx, writes)
}

// settlingCommit commits writes, dropping, one at a time, the create-only
// condition of each write that fails it while a settling fault applies to
// its key.
func (s *Store) settlingCommit(ctx context.Context, c driver.Committer, writes []driver.Write) ([]storage.Version, error) {
	ws := writes
	for {
		vs, err := c.Commit(ctx, ws)
		var oe *driver.OpError
		if !errors.Is(err, storage.ErrPreconditionFailed) || !errors.As(err, &oe) {
			return vs, err
		}
		i := slices.IndexFunc(ws, func(w driver.Write) bool { return w.Key == oe.Key })
		if i < 0 || ws[i].Delete || ws[i].Cond.Kind() != driver.CreateOnly || !s.set.take(oe.Key, &s.set.overwrite, &s.set.doubles) {
			return vs, err
		}
		if len(ws) > 0 && &ws[0] == &writes[0] {
			ws = slices.Clone(writes) // the caller's writes are not ours to change
		}
		ws[i].Cond = storage.Condition{}
	}
}
