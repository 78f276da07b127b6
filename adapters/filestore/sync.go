//go:build unix

package filestore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// syncer makes files and directory entries durable for the writers of one
// Store, sharing one sync among the writers that wait at the same time
// (group commit). A writer asks for a sync with do and is answered once
// its request is durable. The first writer to arrive while no sync runs
// leads: it takes every request waiting (its own included) and syncs them
// as one batch, answers them, and hands the lead to a writer that arrived
// meanwhile. A batch of one is synced as before group commit (fsync of the
// file or directory itself), so a writer alone waits no longer than it
// did; a larger batch is one syncfs(2) of the whole file system. No
// goroutine of its own, and no timer: a batch is whatever waits while the
// previous sync runs.
type syncer struct {
	rootFile *os.File // the store's root, open while the Store lives
	rootFd   int      // its descriptor, for syncfs
	dev      uint64   // the root's device: syncfs covers files on it
	group    bool     // batches of several use syncfs; else every request alone

	// syncfs and fsync are the system calls, replaced by tests.
	syncfs func(fd int) error
	fsync  func(fd int) error

	mu        sync.Mutex
	leading   bool       // a writer is syncing a batch
	pending   []*syncReq // requests waiting for the next batch
	completed uint64     // syncs completed, numbered from 1
	failed    uint64     // number of the last sync that failed; 0: none
	stats     syncStats
}

type syncStats struct {
	requests, batches, syncfs, fsyncs uint64
}

// syncReq asks for one file, or one directory's entries, to be durable.
type syncReq struct {
	fd   int    // an open file to fsync (path names it); or -1, and
	path string //
	dir  string // the directory whose entries to fsync
	dev  uint64 // the file system the file or directory is on
	done chan syncAnswer
}

type syncAnswer struct {
	err  error
	lead bool // no answer yet: lead the next batch, which holds this request
}

// epoch marks the start of a write: failedSince(epoch) later tells whether
// any sync that completed meanwhile failed.
func (s *syncer) epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.completed
}

// failedSince reports whether a sync that completed after epoch failed.
// A writer checks it before acknowledging, because syncfs reports a
// write-back error once, to whichever syncfs runs first after it: that may
// be a batch which did not hold the writer whose data failed to reach the
// disk. So any failure seen while a write was in flight fails the write.
func (s *syncer) failedSince(epoch uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed > epoch
}

// do returns once req's file or directory is durable, or with the error of
// the sync that should have made it so.
func (s *syncer) do(req *syncReq) error {
	if !s.group {
		return s.syncOne(req)
	}
	req.done = make(chan syncAnswer, 1)
	s.mu.Lock()
	s.stats.requests++
	s.pending = append(s.pending, req)
	if s.leading {
		s.mu.Unlock()
		if a := <-req.done; !a.lead {
			return a.err
		}
		s.mu.Lock() // handed the lead; s.leading stayed true
	}
	s.leading = true
	batch := s.pending
	s.pending = nil
	s.mu.Unlock()

	err := s.syncBatch(batch)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.completed++
	s.stats.batches++
	if err != nil {
		s.failed = s.completed
	}
	for _, r := range batch {
		if r != req {
			r.done <- syncAnswer{err: err}
		}
	}
	if len(s.pending) > 0 {
		s.pending[0].done <- syncAnswer{lead: true}
	} else {
		s.leading = false
	}
	return err
}

// syncBatch makes every request of batch durable: one syncfs for those on
// the root's file system when there are several, an fsync of its own for
// any other.
func (s *syncer) syncBatch(batch []*syncReq) error {
	var onRoot int
	for _, r := range batch {
		if r.dev == s.dev {
			onRoot++
		}
	}
	var errs []error
	if onRoot > 1 {
		s.mu.Lock()
		s.stats.syncfs++
		s.mu.Unlock()
		err := s.syncfs(s.rootFd)
		runtime.KeepAlive(s.rootFile)
		if err != nil {
			errs = append(errs, &os.PathError{Op: "syncfs", Path: s.rootFile.Name(), Err: err})
		}
	}
	for _, r := range batch {
		if onRoot <= 1 || r.dev != s.dev {
			errs = append(errs, s.syncOne(r))
		}
	}
	return errors.Join(errs...)
}

// syncOne fsyncs the request's file or directory.
func (s *syncer) syncOne(r *syncReq) error {
	s.mu.Lock()
	s.stats.fsyncs++
	s.mu.Unlock()
	if r.fd >= 0 {
		if err := s.fsync(r.fd); err != nil {
			return &os.PathError{Op: "sync", Path: r.path, Err: err}
		}
		return nil
	}
	dir := r.dir
	d, err := openFd(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	for errors.Is(err, fs.ErrNotExist) && dir != filepath.Dir(dir) {
		// A deletion removed the directory, empty, since its entry
		// changed (filestore's prune): the change is now that removal,
		// an entry of its parent, so the parent is what to sync.
		dir = filepath.Dir(dir)
		d, err = openFd(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	}
	if err != nil {
		return err
	}
	defer unix.Close(d) //nolint:errcheck // read-only
	if err := s.fsync(d); err != nil {
		return &os.PathError{Op: "sync", Path: dir, Err: err}
	}
	return nil
}

// fsyncFd is fsync(2), retried when interrupted.
func fsyncFd(fd int) error {
	for {
		if err := unix.Fsync(fd); err != unix.EINTR {
			return err
		}
	}
}

// kernelAtLeast reports whether a kernel release string ("6.18.44-fc",
// "5.8.0") is at least major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	num := func(i int) int {
		n := 0
		if i < len(parts) {
			for _, c := range parts[i] {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
		}
		return n
	}
	return num(0) > major || num(0) == major && num(1) >= minor
}

// devOf is the device of the file system fi lives on.
func devOf(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev) //nolint:unconvert // int32 on some systems
	}
	return 0
}
