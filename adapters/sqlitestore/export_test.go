package sqlitestore

import "database/sql"

// Commits reports how many transactions d has committed.
func Commits(d any) int64 { return d.(*sqlDriver).commits.Load() }

// SetBeforeCommit makes d run f before each COMMIT (on the committing
// goroutine, with the write connection). Set it before any write.
func SetBeforeCommit(d any, f func(*sql.Conn)) { d.(*sqlDriver).beforeCommit = f }

// Waiting reports how many writes wait for d's next commit.
func Waiting(d any) int {
	c := &d.(*sqlDriver).c
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// SetPruning sets how many change-log entries are kept and how often the
// log is pruned, until t ends.
func SetPruning(t interface{ Cleanup(func()) }, keep, every int64) {
	k, e := keepTail, pruneEvery
	keepTail, pruneEvery = keep, every
	t.Cleanup(func() { keepTail, pruneEvery = k, e })
}

// Leading reports whether a write leads a commit of d now.
func Leading(d any) bool {
	c := &d.(*sqlDriver).c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.busy
}
