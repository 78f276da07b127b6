//go:build unix

package filestore

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// The write and read paths use bare descriptors (golang.org/x/sys/unix),
// never *os.File: an *os.File opened on a regular file is first offered to
// the runtime's network poller (an epoll_ctl that fails, and fcntl calls
// around it, and more fcntl on each Fd), which cost a durable write more
// system calls than the write itself (issue 22 in docs/performance.md).

// eintr retries a system call the kernel interrupted: with SA_RESTART
// most restart by themselves, but not on every file system (FUSE, CIFS,
// NFS may answer the runtime's preemption signal with EINTR), which is
// why package os retries them too. (close is never retried: Linux frees
// the descriptor even when it says EINTR.)
func eintr(call func() error) error {
	for {
		if err := call(); err != unix.EINTR {
			return err
		}
	}
}

// openFd opens path with flags (O_CLOEXEC added), retrying EINTR.
func openFd(path string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, mode)
		if err == nil {
			return fd, nil
		}
		if err != unix.EINTR {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
	}
}

// writeFd writes all of b to fd.
func writeFd(fd int, path string, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "write", Path: path, Err: err}
		}
		if n == 0 {
			return &fs.PathError{Op: "write", Path: path, Err: unix.EIO}
		}
		b = b[n:]
	}
	return nil
}

// readFd reads fd to its end; size is what fstat reported, so the read
// usually takes one call: a regular file read short of the buffer has
// reached its end.
func readFd(fd int, path string, size int64) ([]byte, error) {
	b := make([]byte, 0, size+1) // +1: a full buffer means the file grew
	for {
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		full := len(b)+n == cap(b)
		b = b[:len(b)+n]
		if n == 0 || !full {
			return b, nil
		}
		b = append(b, 0)[:len(b)] // the file grew meanwhile
	}
}

// fstatFd stats the open file fd.
func fstatFd(fd int, path string, st *unix.Stat_t) error {
	if err := eintr(func() error { return unix.Fstat(fd, st) }); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return nil
}

func closeFd(fd int, path string) error {
	if err := unix.Close(fd); err != nil {
		return &fs.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}

func isDir(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }

func mtimeNano(st *unix.Stat_t) int64 { return st.Mtim.Nano() }

// errIsDir is a directory (of other keys) where a value was asked for.
func errIsDir(path string) error { return &fs.PathError{Op: "read", Path: path, Err: unix.EISDIR} }

// renameFile renames from to to, as os.Rename reports it.
func renameFile(from, to string) error {
	if err := eintr(func() error { return unix.Rename(from, to) }); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// notFound reports whether err means no value is stored at a path: it
// does not exist, a parent is a file, or it is a directory of other keys.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EISDIR)
}
