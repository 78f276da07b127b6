//go:build linux || darwin || freebsd || netbsd

package filestore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// getAttr reads the version attribute of the open file fd (at path, for
// errors) into buf. A file without one (written by another tool, or
// copied without its extended attributes) gives ok false and no error.
func getAttr(fd int, path string, buf []byte) (n int, ok bool, err error) {
	err = eintr(func() (err error) {
		n, err = unix.Fgetxattr(fd, attrName, buf)
		return err
	})
	return attrResult(n, path, err)
}

// getAttrAt reads the version attribute of the file at path, without
// opening it: a writer's version check under the key's lock.
func getAttrAt(path string, buf []byte) (n int, ok bool, err error) {
	err = eintr(func() (err error) {
		n, err = unix.Getxattr(path, attrName, buf)
		return err
	})
	return attrResult(n, path, err)
}

func attrResult(n int, path string, err error) (int, bool, error) {
	switch {
	case err == nil:
		return n, true, nil
	case errors.Is(err, errNoAttr), errors.Is(err, unix.ERANGE):
		// ERANGE: longer than any attribute this package writes, so not
		// one of ours.
		return 0, false, nil
	}
	return 0, false, &os.PathError{Op: "getxattr", Path: path, Err: err}
}

// setAttr sets the version attribute on the open file fd (at path, for
// errors). On a file system without user extended attributes it fails
// with ENOTSUP.
func setAttr(fd int, path string, value []byte) error {
	if err := eintr(func() error { return unix.Fsetxattr(fd, attrName, value, 0) }); err != nil {
		return &os.PathError{Op: "setxattr", Path: path, Err: err}
	}
	return nil
}
