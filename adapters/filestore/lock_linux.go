package filestore

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// lockFile is the one file whose bytes are the keys' writer locks.
const lockFile = ".cnvlocks"

// xlocks is the cross-process lock of each key on Linux: an open file
// description lock (F_OFD_SETLK) on one byte of one file in the root, at
// the key's slot. OFD locks belong to the open file, not the process, so
// two Stores of one process exclude each other as two processes do; the
// kernel drops them when the holder dies. Taking and releasing one is a
// system call each; no lock file per key is created, opened or closed.
type xlocks struct {
	file *os.File // kept open while the Store lives; its finalizer closes it
	fd   int
}

func openXlocks(root string) (xlocks, error) {
	f, err := os.OpenFile(filepath.Join(root, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return xlocks{}, err
	}
	return xlocks{file: f, fd: int(f.Fd())}, nil
}

func (x xlocks) lock(ctx context.Context, slot uint64, _ string) (func(), error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(slot), Len: 1}
	err := pollLock(ctx, func() (bool, error) {
		err := unix.FcntlFlock(uintptr(x.fd), unix.F_OFD_SETLK, &lk)
		runtime.KeepAlive(x.file)
		if err == nil {
			return true, nil
		}
		if busy(err) {
			return false, nil
		}
		return false, &fs.PathError{Op: "fcntl", Path: x.file.Name(), Err: err}
	})
	if err != nil {
		return nil, err
	}
	return func() {
		un := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: int64(slot), Len: 1}
		_ = unix.FcntlFlock(uintptr(x.fd), unix.F_OFD_SETLK, &un)
		runtime.KeepAlive(x.file)
	}, nil
}

// remove deletes what a version of this package from before .cnvlocks
// left of the key at path, its lock file; no writer of this version uses
// one (and none of an older version may share the root).
func (xlocks) remove(path string) { _ = unix.Unlink(lockPathOf(path)) }
