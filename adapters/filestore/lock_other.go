//go:build unix && !linux

package filestore

import (
	"context"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockPrefix names a key's lock file, beside its value file.
const lockPrefix = ".cnvlock-"

// xlocks is the cross-process lock of each key where there are no open
// file description locks: flock(2) on a lock file per key beside its
// value file, opened for each write. (Linux locks a byte of one file per
// Store instead: lock_linux.go.)
type xlocks struct{}

func openXlocks(string) (xlocks, error) { return xlocks{}, nil }

func (xlocks) lock(ctx context.Context, _ uint64, path string) (func(), error) {
	lockPath := filepath.Join(filepath.Dir(path), lockPrefix+filepath.Base(path))
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
	return func() {
		_ = unix.Flock(fd, unix.LOCK_UN)
		_ = unix.Close(fd)
	}, nil
}
