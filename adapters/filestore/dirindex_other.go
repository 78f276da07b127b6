//go:build unix && !linux

package filestore

import "os"

// dirCache is the listing index where there is none: without inotify,
// listings read every directory they walk (see ListAfter).
type dirCache struct{}

type indexStats struct {
	builds, drops, overflows, served uint64
}

func newDirCache() *dirCache { return nil }

func (*dirCache) has(string) bool { return false }

func (*dirCache) page(string, string, bool, bool, int) ([]string, bool) { return nil, false }

func (*dirCache) try(_, _ string, f *os.File) (*os.File, []string, bool, bool) {
	return f, nil, false, false
}

func (*dirCache) build(_, _ string, f *os.File) (*os.File, []string, bool, bool) {
	return f, nil, false, false
}

func (*dirCache) close() {}
