package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/runconveyor/conveyor/storage"
)

// watchMask is what a watched directory reports: entries renamed in (a
// Put's rename) or out, deleted, written in place by another tool, and
// created (new directories of keys). IN_ONLYDIR: a path that became a file
// meanwhile is not watched.
const watchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_CLOSE_WRITE | unix.IN_ONLYDIR

// Watch implements driver.Watcher with inotify(7), so it sees writes by
// every process and Store on this directory, typically within a
// millisecond of their rename (before the writer's Put returns). A key
// is a file in nested directories, so one inotify instance per Watch
// watches the directories from the root down to the prefix's and every
// directory inside the prefix, and adds a directory as soon as it is
// created (then scans it, so a key written into it before the watch took
// hold is signalled too). One goroutine per Watch reads the events; when
// ctx ends, the instance is closed, the goroutine ends and the channel is
// closed. Files named ".cnv*" (locks, writes in progress) are ignored.
//
// Limits: each Watch uses one inotify instance (fs.inotify.max_user_instances,
// often 128 per user) and one watch per directory it covers
// (fs.inotify.max_user_watches); watch prefixes that name few directories.
// An exhausted limit fails Watch, or closes the channel of a running watch
// whose prefix grew past it; the caller then polls. A queue overflow in the
// kernel is answered with a signal and a rescan. The locks and inotify need
// a local file system: changes made on another machine through NFS are not
// seen.
func (s *fileDriver) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, &storage.OpError{Op: "watch", Key: prefix, Cause: os.NewSyscallError("inotify_init1", err)}
	}
	w := &watcher{
		root:   s.root,
		prefix: prefix,
		file:   os.NewFile(uintptr(fd), "inotify"), // non-blocking: reads park in the poller, Close wakes them
		dirs:   map[int32]string{},
		ch:     make(chan struct{}, 1),
	}
	if _, err := w.addTree(""); err != nil {
		_ = w.file.Close()
		return nil, &storage.OpError{Op: "watch", Key: prefix, Cause: err}
	}
	stop := context.AfterFunc(ctx, func() { _ = w.file.Close() })
	go w.run(stop)
	return w.ch, nil
}

// watcher is one Watch: its inotify instance and the directories it
// watches, by watch descriptor, as paths relative to the root ("" for the
// root, else "a/b"). Only its goroutine touches it once Watch returns.
type watcher struct {
	root, prefix string
	file         *os.File
	dirs         map[int32]string
	ch           chan struct{}
}

func (w *watcher) run(stop func() bool) {
	defer close(w.ch)
	defer stop()
	defer w.file.Close()
	// Room for many events; one event is at most 16 bytes and a name.
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			return // closed (ctx done) or broken: either way, no more signals
		}
		if err := w.handle(buf[:n]); err != nil {
			return
		}
	}
}

// handle processes the events in b.
func (w *watcher) handle(b []byte) error {
	signal := false
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			break // the kernel writes whole events; never here
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		b = b[end:]
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			// Events were lost: say something changed, and watch any
			// directory whose creation went unseen.
			signal = true
			if _, err := w.addTree(""); err != nil {
				return err
			}
			continue
		}
		dir, ok := w.dirs[ev.Wd]
		if !ok {
			continue
		}
		if ev.Mask&unix.IN_IGNORED != 0 { // the directory is gone
			delete(w.dirs, ev.Wd)
			continue
		}
		if name == "" || strings.HasPrefix(name, ".cnv") {
			continue // locks and writes in progress
		}
		rel := join(dir, name)
		switch {
		case ev.Mask&unix.IN_ISDIR == 0:
			if ev.Mask&unix.IN_CREATE == 0 && strings.HasPrefix(rel, w.prefix) {
				signal = true // renamed in or out, deleted, or written in place
			}
		case !w.relevant(rel):
		case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			found, err := w.addTree(rel)
			if err != nil {
				return err
			}
			signal = signal || found
		default: // a directory of keys deleted or moved away
			signal = true
		}
	}
	if signal {
		select {
		case w.ch <- struct{}{}:
		default: // a signal is already pending
		}
	}
	return nil
}

// relevant reports whether the directory rel (relative to the root) can
// hold keys under the prefix, or lead to them.
func (w *watcher) relevant(rel string) bool {
	dk := rel + "/"
	if rel == "" {
		dk = ""
	}
	return strings.HasPrefix(w.prefix, dk) || strings.HasPrefix(dk, w.prefix)
}

// addTree watches the directory rel and, recursively, the relevant
// directories in it, and reports whether it holds a key under the prefix.
// It watches a directory before reading it, so an entry made meanwhile is
// either read or reported. A directory that vanished is skipped.
func (w *watcher) addTree(rel string) (found bool, err error) {
	path := filepath.Join(w.root, filepath.FromSlash(rel))
	var wd int
	var addErr error
	// Control keeps the descriptor from being closed (ctx ending) during
	// the call, so the number can never be another file's.
	if err := controlFile(w.file, func(fd int) { wd, addErr = unix.InotifyAddWatch(fd, path, watchMask) }); err != nil {
		return false, err
	}
	if addErr != nil {
		if errors.Is(addErr, unix.ENOENT) || errors.Is(addErr, unix.ENOTDIR) {
			return false, nil
		}
		return false, os.NewSyscallError("inotify_add_watch "+path, addErr)
	}
	w.dirs[int32(wd)] = rel
	entries, err := os.ReadDir(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return false, nil
		}
		return false, err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".cnv") {
			continue
		}
		child := join(rel, name)
		if !e.IsDir() {
			found = found || strings.HasPrefix(child, w.prefix)
			continue
		}
		if w.relevant(child) {
			f, err := w.addTree(child)
			if err != nil {
				return false, err
			}
			found = found || f
		}
	}
	return found, nil
}

func controlFile(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
