//go:build unix && !(linux || darwin || freebsd || netbsd)

package filestore

import "errors"

var errNoXattr = errors.New("filestore: extended attributes are not supported on this platform")

func getAttr(int, string, []byte) (int, bool, error) { return 0, false, errNoXattr }

func getAttrAt(string, []byte) (int, bool, error) { return 0, false, errNoXattr }

func setAttr(int, string, []byte) error { return errNoXattr }
