package filestore

import "golang.org/x/sys/unix"

// syncfsReliable reports whether syncfs(2) can be trusted with durability
// here: Linux reports write-back errors from syncfs only since 5.8 (before,
// it returned 0 whatever happened), so an older kernel keeps fsync per
// write.
func syncfsReliable() bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	return kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 8)
}

// syncfs flushes the whole file system fd is on: every dirty file's data
// and metadata and the journal, directory entries included.
func syncfs(fd int) error { return unix.Syncfs(fd) }
