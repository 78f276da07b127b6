package teststores

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Counting is a driver (package storage/driver) that wraps another, usually
// a Store, and counts the round trips of each kind it serves,
// for tests and benchmarks that hold a cost (calls per job, per run).
// Pages counts Lists as S3 bills them, one per page of up to 1,000 keys
// read (at least one per List), and Listed the keys they yielded, for
// costs that must not grow with what a prefix holds. Commits counts the
// commits it forwards, and each write of a commit is also counted as the
// Put or Delete it is, so writes per job compare across stores that commit
// and stores that do not; over a driver that cannot commit, the Store over
// the count cannot either (storage.Store.CanCommit).
type Counting struct {
	driver.Store
	Gets, Puts, Deletes, Lists atomic.Int64
	Pages, Listed, Commits     atomic.Int64
}

var _ driver.Committer = (*Counting)(nil)

// Get counts and forwards.
func (c *Counting) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	c.Gets.Add(1)
	return c.Store.Get(ctx, key)
}

// Put counts and forwards.
func (c *Counting) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	c.Puts.Add(1)
	return c.Store.Put(ctx, key, value, cond)
}

// Delete counts and forwards.
func (c *Counting) Delete(ctx context.Context, key string, cond storage.Condition) error {
	c.Deletes.Add(1)
	return c.Store.Delete(ctx, key, cond)
}

// Commit counts the commit and each of its writes, and forwards.
func (c *Counting) Commit(ctx context.Context, writes []driver.Write) ([]storage.Version, error) {
	cm, ok := c.Store.(driver.Committer)
	if !ok {
		return nil, &storage.OpError{Op: "commit", Kind: errors.ErrUnsupported}
	}
	c.Commits.Add(1)
	for _, w := range writes {
		if w.Delete {
			c.Deletes.Add(1)
		} else {
			c.Puts.Add(1)
		}
	}
	return cm.Commit(ctx, writes)
}

// ListAfter counts and forwards: one List, its pages and keys (a List of
// the Store over the count is a ListAfter from the start).
func (c *Counting) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return c.count(c.Store.ListAfter(ctx, prefix, after))
}

// count counts one listing and forwards what it yields.
func (c *Counting) count(list iter.Seq2[string, error]) iter.Seq2[string, error] {
	c.Lists.Add(1)
	return func(yield func(string, error) bool) {
		n := int64(0)
		defer func() { c.Pages.Add(max(1, (n+999)/1000)); c.Listed.Add(n) }()
		for k, err := range list {
			n++
			if !yield(k, err) {
				return
			}
		}
	}
}

// PagedOps is the round trips as S3 bills them: Gets, Puts, Deletes and
// the List pages.
func (c *Counting) PagedOps() int64 {
	return c.Gets.Load() + c.Puts.Load() + c.Deletes.Load() + c.Pages.Load()
}

// Reset sets every count to zero.
func (c *Counting) Reset() {
	c.Gets.Store(0)
	c.Puts.Store(0)
	c.Deletes.Store(0)
	c.Lists.Store(0)
	c.Pages.Store(0)
	c.Listed.Store(0)
	c.Commits.Store(0)
}

// Total is the number of round trips counted, a commit's writes counted
// one by one (Puts and Deletes), as the writes they would be without it.
func (c *Counting) Total() int64 {
	return c.Gets.Load() + c.Puts.Load() + c.Deletes.Load() + c.Lists.Load()
}

// Unwrap returns the counted driver (driver.Unwrapper), so its settle time
// is found through the count.
func (c *Counting) Unwrap() driver.Store { return c.Store }
