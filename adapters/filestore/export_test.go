//go:build unix

package filestore

import "context"

// LockForTest takes the writer lock of key as a Put would, for tests that
// hold it from another process.
func LockForTest(ctx context.Context, s *Store, key string) (unlock func(), err error) {
	if err := s.mkdirs(key); err != nil {
		return nil, err
	}
	return s.locks.lock(ctx, key, s.path(key))
}

// SyncStats counts what a Store's syncer did.
type SyncStats struct {
	Requests, Batches, Syncfs, Fsyncs uint64
}

// SyncStatsForTest returns the counts of s's syncer.
func SyncStatsForTest(s *Store) SyncStats {
	s.sync.mu.Lock()
	defer s.sync.mu.Unlock()
	st := s.sync.stats
	return SyncStats{st.requests, st.batches, st.syncfs, st.fsyncs}
}

// GroupCommitForTest reports whether s shares syncs among writers.
func GroupCommitForTest(s *Store) bool { return s.sync.group }

// SetSyncForTest replaces s's system calls; call it before s is used.
// fsync gets the descriptor of the file or directory a lone request syncs.
func SetSyncForTest(s *Store, syncfs, fsync func(fd int) error) {
	s.sync.syncfs, s.sync.fsync = syncfs, fsync
}

// SetAfterRenameForTest makes every Put call fn(key) after its rename and
// before the sync that makes it durable; call it before s is used.
func SetAfterRenameForTest(s *Store, fn func(key string)) { s.afterRename = fn }

// RealSyncfs and RealFsync are the system calls SetSyncForTest replaces.
var (
	RealSyncfs = syncfs
	RealFsync  = fsyncFd
)

// KernelAtLeastForTest is kernelAtLeast.
var KernelAtLeastForTest = kernelAtLeast
