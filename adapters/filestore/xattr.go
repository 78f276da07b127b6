//go:build linux || darwin || freebsd || netbsd

package filestore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// getAttr reads the version attribute of the open file f into buf. A file
// without one (written by another tool, or copied without its extended
// attributes) gives ok false and no error.
func getAttr(f *os.File, buf []byte) (n int, ok bool, err error) {
	n, err = unix.Fgetxattr(int(f.Fd()), attrName, buf)
	switch {
	case err == nil:
		return n, true, nil
	case errors.Is(err, errNoAttr), errors.Is(err, unix.ERANGE):
		// ERANGE: longer than any attribute this package writes, so not
		// one of ours.
		return 0, false, nil
	}
	return 0, false, &os.PathError{Op: "getxattr", Path: f.Name(), Err: err}
}

// setAttr sets the version attribute on the open file f. On a file system
// without user extended attributes it fails with ENOTSUP.
func setAttr(f *os.File, value []byte) error {
	if err := unix.Fsetxattr(int(f.Fd()), attrName, value, 0); err != nil {
		return &os.PathError{Op: "setxattr", Path: f.Name(), Err: err}
	}
	return nil
}
