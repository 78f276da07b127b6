//go:build darwin || freebsd || netbsd

package filestore

import "golang.org/x/sys/unix"

// errNoAttr is what getxattr(2) says for a file without the attribute.
const errNoAttr = unix.ENOATTR
