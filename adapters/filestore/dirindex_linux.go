package filestore

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// indexDirs is how many directories a Store indexes at once; the least
	// recently listed one is dropped for a new one.
	indexDirs = 4
	// indexPendingMax bounds the changed names an index keeps to check
	// between two listings of its directory; past it the index is dropped
	// (rebuilding costs a read of the directory, as a listing without it).
	indexPendingMax = 8192
	// indexMask is what an indexed directory reports: entries made,
	// renamed in or out and removed, and its own removal or move. (In
	// place writes change no name.)
	indexMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
		unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
)

// dirCache is a Store's listing index: the sorted names of a few large
// directories, kept exact by inotify(7) so that a listing with a cursor
// inside one of them seeks instead of reading every name.
//
// Why it is exact: the kernel queues a directory's IN_CREATE, IN_MOVED_TO,
// IN_MOVED_FROM and IN_DELETE inside the system call that changes it
// (rename, unlink, mkdir...), before that call returns, whichever process
// makes it. The watch is added before the directory is read, so a change
// is either in what was read or in the queue (or both). Every listing
// served from an index first drains the queue (a non-blocking read) and
// checks each name an event named with fstatat(2): so it sees every change
// completed before it began. A lost event (IN_Q_OVERFLOW), a watch the
// kernel dropped (IN_IGNORED), the directory removed or moved, or its path
// now naming another directory (checked with a stat per listing; the
// index holds the directory open, so its inode number is not reused)
// drops the index, and the listing reads the directory as without one.
//
// Cost: one inotify instance per Store, one watch and one descriptor per
// indexed directory (at most indexDirs), and the names (about 16 bytes
// and the name each). All calls hold mu; nothing runs in the background.
type dirCache struct {
	mu     sync.Mutex
	fd     int // inotify instance; -1 until the first index
	closed bool
	dirs   map[string]*dirIndex // by directory ("a/b/")
	byWd   map[int32]*dirIndex
	tick   uint64
	buf    []byte
	stats  indexStats
	// sizeHint is indexSizeHint; tests change it.
	sizeHint int64
	// overflow, when set (by tests), is consulted at every drain: true
	// acts as if the kernel had reported IN_Q_OVERFLOW.
	overflow func() bool
}

// indexStats counts what a dirCache did, for tests.
type indexStats struct {
	builds, drops, overflows, served uint64
}

// dirIndex is one indexed directory.
type dirIndex struct {
	dir      string // the keys' prefix, "a/b/"
	path     string
	file     *os.File // held open: its inode stays allocated, fstatat
	fd       int
	dev, ino uint64
	wd       int32
	names    sortedNames
	pending  map[string]struct{} // names events named since the last check
	used     uint64
}

func newDirCache() *dirCache {
	return &dirCache{fd: -1, dirs: map[string]*dirIndex{}, byWd: map[int32]*dirIndex{}, sizeHint: indexSizeHint}
}

// has reports whether dir is indexed (it may still be dropped at the next
// page).
func (c *dirCache) has(dir string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && c.dirs[dir] != nil
}

// page returns up to max names of the indexed directory dir from bound on
// (bound itself only when inclusive), and false when dir has no index (any
// more). refresh (the first page of a listing) first applies every change
// the kernel queued, so that the page reflects every change completed
// before the call.
func (c *dirCache) page(dir, bound string, inclusive, refresh bool, max int) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dirs[dir]
	if d == nil || c.closed {
		return nil, false
	}
	defer c.idle()
	if refresh {
		c.drain()
		if c.dirs[dir] != d || !c.check(d) {
			return nil, false
		}
		c.stats.served++
	}
	c.tick++
	d.used = c.tick
	i := d.names.seek(bound, inclusive)
	n := min(max, len(d.names.names)-i)
	if n <= 0 {
		return nil, true
	}
	return append([]string(nil), d.names.names[i:i+n]...), true
}

// drain reads every queued event without waiting and notes the names they
// name in their directory's index; it drops what it can no longer keep
// exact.
func (c *dirCache) drain() {
	if c.fd < 0 {
		return
	}
	if c.overflow != nil && c.overflow() {
		c.lost()
	}
	if c.buf == nil {
		c.buf = make([]byte, 64<<10)
	}
	for {
		n, err := unix.Read(c.fd, c.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		if err != nil || n <= 0 {
			// An instance that cannot be read cannot vouch for anything.
			c.lost()
			_ = unix.Close(c.fd)
			c.fd = -1
			return
		}
		c.handle(c.buf[:n])
	}
}

// lost drops every index: events were lost, and nothing says whose.
func (c *dirCache) lost() {
	c.stats.overflows++
	c.dropAll()
}

func (c *dirCache) handle(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return // the kernel writes whole events; never here
		}
		nameb := b[unix.SizeofInotifyEvent:end]
		b = b[end:]
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			c.lost()
			continue
		}
		d := c.byWd[ev.Wd]
		if d == nil {
			continue // a watch already dropped
		}
		if ev.Mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0 {
			c.drop(d)
			continue
		}
		if i := bytes.IndexByte(nameb, 0); i >= 0 {
			nameb = nameb[:i]
		}
		if len(nameb) == 0 || strings.HasPrefix(string(nameb), ".cnv") {
			continue // locks and writes in progress
		}
		if len(d.pending) >= indexPendingMax {
			c.drop(d) // cheaper to read the directory again
			continue
		}
		d.pending[string(nameb)] = struct{}{}
	}
}

// check brings d up to date with the names its events named, each looked
// up with fstatat, and verifies that d's path still names d's directory.
// False (d dropped) on any doubt.
func (c *dirCache) check(d *dirIndex) bool {
	if len(d.pending) > 0 {
		var adds, removes []string
		for name := range d.pending {
			var st unix.Stat_t
			err := eintr(func() error { return unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
			switch {
			case errors.Is(err, unix.ENOENT):
				removes = append(removes, name, name+"/")
			case err != nil:
				c.drop(d)
				return false
			case isDir(&st):
				adds, removes = append(adds, name+"/"), append(removes, name)
			case st.Mode&unix.S_IFMT == unix.S_IFREG:
				adds, removes = append(adds, name), append(removes, name+"/")
			default: // neither a key nor a directory of keys, as a listing skips it
				removes = append(removes, name, name+"/")
			}
		}
		d.names.apply(adds, removes)
		clear(d.pending)
	}
	var st unix.Stat_t
	if err := eintr(func() error { return unix.Stat(d.path, &st) }); err != nil ||
		uint64(st.Dev) != d.dev || st.Ino != d.ino { //nolint:unconvert // int32 on some systems
		c.drop(d)
		return false
	}
	return true
}

// indexSizeHint is the directory size (st_size) from which a listing with
// a cursor inside a directory reads it under a watch, to index it if it
// holds indexMin entries: a directory of 1,000 entries takes at least
// 16 KiB on ext4 (and on tmpfs, 20 KiB). Smaller ones are read as without
// an index, and indexed by that read if they prove large after all.
const indexSizeHint = 16 << 10

// try is build for a directory f, open at path, that its size says may be
// large (else it returns f untouched, and tried false).
func (c *dirCache) try(dir, path string, f *os.File) (_ *os.File, names []string, indexed, tried bool) {
	if c == nil {
		return f, nil, false, false
	}
	c.mu.Lock()
	hint := c.sizeHint
	c.mu.Unlock()
	fi, err := f.Stat()
	if err != nil || !fi.IsDir() || fi.Size() < hint {
		return f, nil, false, false
	}
	return c.build(dir, path, f)
}

// build indexes the directory dir, open as f (from path), unless it is
// indexed already or has fewer than indexMin entries. The watch is added
// before the directory is read. It returns f if it left it unread (the
// caller reads and closes it), and takes it otherwise; names, when the
// directory was read but not indexed, are its sorted names (relative, as
// in an index); indexed says that dir has an index now.
func (c *dirCache) build(dir, path string, f *os.File) (_ *os.File, names []string, indexed, tried bool) {
	if c == nil {
		return f, nil, false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return f, nil, false, false
	}
	if c.dirs[dir] != nil {
		_ = f.Close()
		return nil, nil, true, true
	}
	defer c.idle()
	if c.fd < 0 {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			return f, nil, false, true // out of instances (a limit per user): list without
		}
		c.fd = fd
	}
	d := &dirIndex{dir: dir, path: path, file: f, fd: int(f.Fd()), pending: map[string]struct{}{}}
	if !c.watch(d) {
		return f, nil, false, true
	}
	names, err := readNames(f)
	if err != nil || len(names) < indexMin {
		_, _ = unix.InotifyRmWatch(c.fd, uint32(d.wd))
		_ = f.Close()
		if err != nil {
			return nil, nil, false, true
		}
		return nil, names, false, true
	}
	d.names.names = names
	c.add(d)
	return nil, nil, true, true
}

// watch adds the inotify watch of d's directory, before it is read, and
// reports whether it holds: the directory d opened is still the one at
// its path, and no other index watches it under another path.
func (c *dirCache) watch(d *dirIndex) bool {
	var st unix.Stat_t
	if err := fstatFd(d.fd, d.path, &st); err != nil || !isDir(&st) {
		return false
	}
	d.dev, d.ino = uint64(st.Dev), st.Ino //nolint:unconvert // int32 on some systems
	wd, err := unix.InotifyAddWatch(c.fd, d.path, indexMask)
	if err != nil {
		return false // out of watches, or gone
	}
	d.wd = int32(wd)
	if c.byWd[d.wd] != nil { // the same directory under another path: never drop that watch
		return false
	}
	// The watch is on whatever the path named when it was added: the
	// directory opened, unless the path was changed meanwhile.
	if err := eintr(func() error { return unix.Stat(d.path, &st) }); err != nil ||
		uint64(st.Dev) != d.dev || st.Ino != d.ino { //nolint:unconvert // int32 on some systems
		_, _ = unix.InotifyRmWatch(c.fd, uint32(d.wd))
		return false
	}
	return true
}

// readNames reads the directory f, whole, and returns its entries' names
// as an index holds them: sorted, a directory's with a trailing "/", and
// neither the adapter's own files nor anything but files and directories.
func readNames(f *os.File) ([]string, error) {
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".cnv"):
		case e.IsDir():
			names = append(names, name+"/")
		case e.Type().IsRegular():
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// add keeps d, dropping the least recently listed index when indexDirs
// are kept already.
func (c *dirCache) add(d *dirIndex) {
	if len(c.dirs) >= indexDirs {
		var lru *dirIndex
		for _, x := range c.dirs {
			if lru == nil || x.used < lru.used {
				lru = x
			}
		}
		c.drop(lru)
	}
	c.tick++
	d.used = c.tick
	c.dirs[d.dir] = d
	c.byWd[d.wd] = d
	c.stats.builds++
}

// idle closes the inotify instance while no directory is indexed.
func (c *dirCache) idle() {
	if len(c.dirs) == 0 && c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
}

// drop forgets d and releases its watch and descriptor.
func (c *dirCache) drop(d *dirIndex) {
	if c.dirs[d.dir] != d {
		return
	}
	delete(c.dirs, d.dir)
	delete(c.byWd, d.wd)
	if c.fd >= 0 {
		// Fails harmlessly when the kernel dropped the watch already; its
		// last events (IN_IGNORED) name a watch no longer known.
		_, _ = unix.InotifyRmWatch(c.fd, uint32(d.wd))
	}
	_ = d.file.Close()
	c.stats.drops++
}

func (c *dirCache) dropAll() {
	for _, d := range c.dirs {
		c.drop(d)
	}
}

// close releases every index, the inotify instance and the descriptors;
// later listings read directories.
func (c *dirCache) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.dropAll()
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
}
