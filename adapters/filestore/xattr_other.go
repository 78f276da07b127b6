//go:build unix && !(linux || darwin || freebsd || netbsd)

package filestore

import (
	"errors"
	"os"
)

var errNoXattr = errors.New("filestore: extended attributes are not supported on this platform")

func getAttr(*os.File, []byte) (int, bool, error) { return 0, false, errNoXattr }

func setAttr(*os.File, []byte) error { return errNoXattr }
