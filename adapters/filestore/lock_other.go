//go:build unix && !linux

package filestore

import (
	"context"
	"io/fs"

	"golang.org/x/sys/unix"
)

// xlocks is the cross-process lock of each key where there are no open
// file description locks: flock(2) on a lock file per key beside its
// value file, opened for each write. (Linux locks a byte of one file per
// Store instead: lock_linux.go.)
type xlocks struct{}

func openXlocks(string) (xlocks, error) { return xlocks{}, nil }

func (xlocks) lock(ctx context.Context, _ uint64, path string) (func(), error) {
	lockPath := lockPathOf(path)
	for {
		fd, err := openFd(lockPath, unix.O_RDWR|unix.O_CREAT, 0o644)
		if err != nil {
			return nil, err
		}
		err = pollLock(ctx, func() (bool, error) {
			err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
			if err == nil {
				return true, nil
			}
			if busy(err) {
				return false, nil
			}
			return false, &fs.PathError{Op: "flock", Path: lockPath, Err: err}
		})
		if err != nil {
			_ = unix.Close(fd)
			return nil, err
		}
		// A deletion removes the lock file under its lock (remove): the
		// file locked here may be one removed while this writer waited,
		// which no longer excludes anyone. Then lock the one at the path.
		var held, now unix.Stat_t
		if unix.Fstat(fd, &held) == nil && unix.Stat(lockPath, &now) == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			return func() {
				_ = unix.Flock(fd, unix.LOCK_UN)
				_ = unix.Close(fd)
			}, nil
		}
		_ = unix.Flock(fd, unix.LOCK_UN)
		_ = unix.Close(fd)
	}
}

// remove deletes the lock file of the key at path; the caller holds its
// lock, so no writer holds it, and a writer waiting on it locks anew.
func (xlocks) remove(path string) { _ = unix.Unlink(lockPathOf(path)) }
