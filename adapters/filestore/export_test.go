//go:build unix

package filestore

import (
	"context"

	"github.com/runconveyor/conveyor/storage/driver"
)

// LockForTest takes the writer lock of key as a Put would, for tests that
// hold it from another process.
func LockForTest(ctx context.Context, of hasDriver, key string) (unlock func(), err error) {
	s := of.Unwrap().(*fileDriver)
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
func SyncStatsForTest(of hasDriver) SyncStats {
	s := of.Unwrap().(*fileDriver)
	s.sync.mu.Lock()
	defer s.sync.mu.Unlock()
	st := s.sync.stats
	return SyncStats{st.requests, st.batches, st.syncfs, st.fsyncs}
}

// GroupCommitForTest reports whether s shares syncs among writers.
func GroupCommitForTest(of hasDriver) bool {
	s := of.Unwrap().(*fileDriver)
	return s.sync.group
}

// SetSyncForTest replaces s's system calls; call it before s is used.
// fsync gets the descriptor of the file or directory a lone request syncs.
func SetSyncForTest(of hasDriver, syncfs, fsync func(fd int) error) {
	s := of.Unwrap().(*fileDriver)
	s.sync.syncfs, s.sync.fsync = syncfs, fsync
}

// SetAfterRenameForTest makes every Put call fn(key) after its rename and
// before the sync that makes it durable; call it before s is used.
func SetAfterRenameForTest(of hasDriver, fn func(key string)) {
	s := of.Unwrap().(*fileDriver)
	s.afterRename = fn
}

// RealSyncfs and RealFsync are the system calls SetSyncForTest replaces.
var (
	RealSyncfs = syncfs
	RealFsync  = fsyncFd
)

// KernelAtLeastForTest is kernelAtLeast.
var KernelAtLeastForTest = kernelAtLeast

// hasDriver is a Store over a Driver (a *storage.Store, or the tests' own
// wrapper of one), whose driver the hooks reach.
type hasDriver interface{ Unwrap() driver.Store }

// RootForTest is the directory of d, a driver NewDriver returned.
func RootForTest(d driver.Store) string { return d.(*fileDriver).Root() }
