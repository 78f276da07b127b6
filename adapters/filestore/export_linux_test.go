package filestore

// IndexStats counts what a Store's listing index did.
type IndexStats struct {
	// Builds and Drops count directories indexed and dropped (evicted,
	// closed, or no longer vouched for); Overflows the events lost
	// (IN_Q_OVERFLOW, real or simulated); Served the listings an index
	// answered.
	Builds, Drops, Overflows, Served uint64
	// Dirs is the number of directories indexed now.
	Dirs int
}

// IndexStatsForTest returns the counts of s's listing index.
func IndexStatsForTest(of hasDriver) IndexStats {
	s := of.Unwrap().(*fileDriver)
	c := s.dirs
	c.mu.Lock()
	defer c.mu.Unlock()
	return IndexStats{c.stats.builds, c.stats.drops, c.stats.overflows, c.stats.served, len(c.dirs)}
}

// SetIndexOverflowForTest makes every drain of s's inotify queue ask fn
// whether to act as if the kernel had reported IN_Q_OVERFLOW.
func SetIndexOverflowForTest(of hasDriver, fn func() bool) {
	s := of.Unwrap().(*fileDriver)
	s.dirs.mu.Lock()
	defer s.dirs.mu.Unlock()
	s.dirs.overflow = fn
}

// IndexMinForTest is the size from which a directory is indexed.
const IndexMinForTest = indexMin

// SetIndexSizeHintForTest sets the directory size from which a listing
// with a cursor inside reads the directory under a watch.
func SetIndexSizeHintForTest(of hasDriver, size int64) {
	s := of.Unwrap().(*fileDriver)
	s.dirs.mu.Lock()
	defer s.dirs.mu.Unlock()
	s.dirs.sizeHint = size
}
