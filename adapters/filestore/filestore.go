//go:build unix

// Package filestore is a storage.Store in a local directory: the embedded
// default a Worker uses when no object store is configured. It survives
// restarts and may be shared by several processes on one machine.
//
// Layout: a key is a file path under the root, so a run folder reads like
// docs/spec.md#key-layout; writers keep their temporary files beside it, and their locks
// in one file at the root:
//
//	<root>/agents/x/runs/r1/status.json              exactly the value's bytes
//	<root>/agents/x/runs/r1/.cnvtmp-*                a write in progress
//	<root>/.cnvlocks                                 writers' locks (Linux)
//
// The Store refuses key segments starting with ".cnv", so these
// names can never be keys, and refuses "..", so no key leaves the root.
//
// # Versions
//
// A value file holds the value and nothing else (jq reads status.json). Its
// version lives in an extended attribute of the same file,
// "user.conveyor.version": a random 128-bit token drawn per write, plus the
// mtime and size the file had when it was written. What is guaranteed, and
// why:
//
//   - Every write gets a new version, identical bytes or not, and a version
//     is never reused (A-B-A cannot bring one back): the token is random
//     per write, never derived from the bytes.
//   - A reader never pairs a value with another write's version, without a
//     lock: value and attribute belong to one inode, written completely
//     (and fsync'd) under a temporary name before rename(2) puts that inode
//     at the key. Get reads both through one open file, so it sees one
//     write's bytes and that same write's token, never a mix. (A sidecar
//     file would make them two renames, and a reader or a crash between
//     them could pair a new value with an old version.)
//   - A crash leaves either the old file or the new one at the key, each
//     with its own attribute; at worst a .cnvtmp- file, which is never a key.
//   - A file at a key that has no valid attribute (written by another tool,
//     edited in place so that its mtime or size no longer match, or copied
//     without extended attributes) is still a value: its version is
//     "sha256-" and a hash of its bytes. It can be read, and overwritten
//     unconditionally or with IfMatch of that version; the next write gives
//     it a token. Such a content version repeats only for identical bytes,
//     so a compare-and-swap on it acts on the bytes that are there. An
//     in-place edit that keeps both size and mtime goes unseen: write with
//     rename, as editors and the SDK do.
//
// New refuses a directory whose file system has no user extended attributes
// (ext4, xfs, btrfs, APFS and tmpfs since Linux 6.6 have them).
//
// Writers hold the key's lock for the whole read-check-write, which makes
// conditional writes atomic across goroutines and processes. The lock has
// two levels: within a process, a table of the keys being written, where a
// writer waits on a channel; across processes, on Linux, an open file
// description lock (fcntl F_OFD_SETLK) on one byte of <root>/.cnvlocks at
// an offset hashed from the key (elsewhere, flock(2) on a lock file
// .cnvlock-<name> beside the key). Only the first writer of a key in a
// process asks the kernel, which polls while another process holds it, so
// the wait ends when the context does, even if the holder is a paused
// process; locks are per key, so a paused holder delays only writers of its
// own key (and, by a 2^-62 chance, of a key hashed to the same byte). A
// killed holder's lock is released by the kernel. Every process sharing a
// root must lock the same way: a version of this package from before
// .cnvlocks (which took flock per key on Linux too) must not write to a
// root a newer one writes to. Deleting a key leaves nothing of it behind:
// on Linux a key has no lock file of its own, elsewhere its lock file is
// removed under its lock (a writer that then locks the removed file sees
// it is no longer at its path and locks the new one), and the directories
// the deletion left empty are removed up to the root. rmdir(2) removes
// only an empty directory, so a concurrent write into it (whose temporary
// file is there from before its rename) keeps it; a write whose directory
// vanished between its mkdir and its open makes it again and retries. The
// locks need a local file system; do not share the root over NFS.
//
// A durable write costs, in system calls: the lock and its release, a stat
// and a getxattr of the key (the version check; none for an unconditional
// Put), then open, write, fstat, fsetxattr, close and rename of the
// temporary file, and its share of the syncs. Files are handled through
// bare descriptors, never *os.File, whose offer of every regular file to
// the runtime's poller costs more calls than the write itself.
//
// # Durability and group commit
//
// A Put returns only once its value, its version attribute and the rename
// that puts them at the key are durable, and a Delete once the removal is;
// so a completed write survives a crash or power loss. Each write takes
// two syncs: one of its temporary file before the rename, one of the
// directory after it (plus one of a parent for each directory it creates).
// Writers that need a sync at the same time share it (group commit): the
// first to arrive while no sync runs does its own at once (fsync(2) of the
// file or directory, exactly what a write did before group commit, so a
// writer alone waits no longer), and the writers that arrive meanwhile are
// served together by the next sync, one syncfs(2) on the root, which makes
// every file and directory entry of the file system durable. The key's
// lock is held from the version check until the second sync returns, so
// compare-and-swap stays atomic per key, as before; the rename takes effect
// when it is done (readers may see it before the Put returns, as they
// could before), and the Put is acknowledged after. A sync that fails
// fails every write in flight while it ran, not only its own batch:
// syncfs reports a lost write-back once, to whichever syncfs comes first.
// A failure before the rename leaves the key as it was; after it, the
// error matches storage.ErrOutcomeUnknown.
//
// syncfs is Linux's, and reports write-back errors only since Linux 5.8:
// elsewhere, and on older kernels, every write does its own fsyncs as
// before. syncfs flushes the whole file system, data other programs left
// dirty included, so a root on a file system busy with unrelated writes
// pays for them: PerWriteSync turns group commit off. Keys must live on the
// root's file system; a directory mounted from another one beneath the
// root is synced file by file.
//
// # Listing
//
// A listing walks the directories in key order and skips, unopened, every
// directory whose keys all sort before its cursor; a directory on the
// cursor's own path must yield the names after the cursor, and reading it
// would cost all of its names. On Linux a Store therefore indexes a large
// one (1,000 entries or more, listed with a cursor inside it; at most 4 at
// once): its sorted names, kept exact with inotify and checked before every
// listing, so that an idle poll of a folder of 100,000 events costs what
// one of 1,000 costs. Listings see every write completed before they began,
// by any process, index or not. Close releases the index's descriptors.
// See ListAfter.
//
// # Watching
//
// The Store watches (storage.Store's Watch) with inotify on Linux (see Watch): a
// write by any process on the directory wakes the watchers of its key.
package filestore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

const (
	tempPrefix = ".cnvtmp-"
	// attrName is the extended attribute holding a value file's stamp.
	attrName = "user.conveyor.version"
	// contentPrefix starts the version of a file without a valid stamp; a
	// token is 32 hex digits, so the two kinds never collide.
	contentPrefix = "sha256-"
	// maxStampLen bounds a stamp: token, mtime and size in decimal.
	maxStampLen = 32 + 1 + 20 + 1 + 20
)

// fileDriver is the driver (package storage/driver) under the Store New
// returns.
type fileDriver struct {
	root  string
	sync  *syncer
	locks *keyLocks
	// dirs indexes large directories that listings seek into (Linux; nil
	// elsewhere).
	dirs *dirCache
	// afterRename, when set (by tests), runs after a Put's rename and
	// before the sync that makes it durable.
	afterRename func(key string)
}

var (
	_ driver.Store   = (*fileDriver)(nil)
	_ driver.Watcher = (*fileDriver)(nil)
)

// Option configures a Store in New.
type Option func(*config)

type config struct {
	perWriteSync bool
}

// PerWriteSync makes every write pay its own fsyncs (the file, then its
// directory after the rename) instead of sharing syncs with concurrent
// writers. It is what a Store does where group commit is not available
// (see the package doc); as an option it is the baseline group commit is
// measured against, and a way out on a file system where syncfs(2) is
// slow because others keep much unrelated data dirty on it.
func PerWriteSync() Option { return func(c *config) { c.perWriteSync = true } }

// New opens (creating if needed) the store rooted at dir. Several Stores,
// in one process or many, may share one dir. Close releases what its
// listing index holds.
func New(dir string, opts ...Option) (*storage.Store, error) {
	d, err := newDriver(dir, opts...)
	if err != nil {
		return nil, err
	}
	return storage.New(d), nil
}

// NewDriver opens the store rooted at dir as New does, and returns its
// driver (package storage/driver), for tests that wrap a driver; it also
// implements driver.Watcher (on Linux) and io.Closer.
func NewDriver(dir string, opts ...Option) (driver.Store, error) {
	d, err := newDriver(dir, opts...)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func newDriver(dir string, opts ...Option) (*fileDriver, error) {
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	if err := probeAttr(root); err != nil {
		return nil, err
	}
	x, err := openXlocks(root)
	if err != nil {
		return nil, err
	}
	// The root stays open for syncfs(2) while the Store lives; the
	// *os.File's finalizer closes it once the Store is unreachable. Its
	// descriptor is taken once: every Fd call costs fcntl calls.
	f, err := os.Open(root)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	s := &fileDriver{root: root, locks: newKeyLocks(x), dirs: newDirCache(), sync: &syncer{
		rootFile: f,
		rootFd:   int(f.Fd()),
		dev:      devOf(fi),
		group:    !c.perWriteSync && syncfsReliable(),
		syncfs:   syncfs,
		fsync:    fsyncFd,
	}}
	if s.dirs != nil {
		// As the root's descriptor: released when the Store is
		// unreachable, if Close was not called.
		runtime.AddCleanup(s, func(c *dirCache) { c.close() }, s.dirs)
	}
	return s, nil
}

// Close releases what the Store's listing index holds (see ListAfter): its
// inotify instance, watches and directory descriptors. The Store remains
// usable; its listings then read every directory they walk. A Store that
// is never closed releases them when it is garbage collected.
func (s *fileDriver) Close() error {
	s.dirs.close()
	return nil
}

// probeAttr checks that files under root can carry the version attribute,
// so that a store which cannot keep versions fails at New, not at its
// first write.
func probeAttr(root string) error {
	path := filepath.Join(root, tempPrefix+"probe-"+string(newToken()))
	fd, err := openFd(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer unix.Unlink(path) //nolint:errcheck // a leftover temp file is never a key
	defer unix.Close(fd)    //nolint:errcheck // nothing was written
	if err := setAttr(fd, path, []byte("probe")); err != nil {
		return fmt.Errorf("filestore: %s cannot hold versions: its file system has no user extended attributes: %w", root, err)
	}
	return nil
}

// Root is the absolute directory the store lives in.
func (s *fileDriver) Root() string { return s.root }

func (s *fileDriver) path(key string) string { return filepath.Join(s.root, filepath.FromSlash(key)) }

// Get implements driver.Store. It takes no lock: the value and its
// version are read through one open file, so they belong to one write.
func (s *fileDriver) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	b, v, err := readValue(s.path(key))
	if err != nil {
		if notFound(err) {
			return nil, "", &storage.OpError{Op: "get", Key: key, Kind: storage.ErrNotFound, Cause: err}
		}
		return nil, "", &storage.OpError{Op: "get", Key: key, Cause: err}
	}
	return b, v, nil
}

// readValue reads the value file at path and its version, through one
// open file: open, fstat, read, fgetxattr, close. A directory (of other
// keys) is no value and gives EISDIR. Another tool writing the file in
// place during the read may leave torn bytes paired with the stamp's
// token; no compare-and-swap can use that token, as the file's mtime no
// longer matches its stamp. O_NONBLOCK: a FIFO placed at a key by another
// tool does not hang the reader (it has no effect on regular files).
func readValue(path string) ([]byte, storage.Version, error) {
	fd, err := openFd(path, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, "", err
	}
	defer unix.Close(fd) //nolint:errcheck // read-only
	var st unix.Stat_t
	if err := fstatFd(fd, path, &st); err != nil {
		return nil, "", err
	}
	if isDir(&st) {
		return nil, "", errIsDir(path)
	}
	b, err := readFd(fd, path, st.Size)
	if err != nil {
		return nil, "", err
	}
	if int64(len(b)) == st.Size {
		var buf [maxStampLen]byte
		n, ok, err := getAttr(fd, path, buf[:])
		if err != nil {
			return nil, "", err
		}
		if tok, valid := stampToken(buf[:n], ok, &st); valid {
			return b, tok, nil
		}
	}
	return b, contentVersion(b), nil
}

// stamp is the value of a file's version attribute: the write's token and
// the mtime and size the file had when it was written, so that a later
// in-place change by another tool, which keeps the attribute, is noticed.
func stamp(token storage.Version, st *unix.Stat_t) []byte {
	b := make([]byte, 0, maxStampLen)
	b = append(b, token...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, mtimeNano(st), 10)
	b = append(b, ' ')
	return strconv.AppendInt(b, st.Size, 10)
}

// stampToken returns the token of the stamp attr (ok: the file has the
// attribute) if it matches st, the file as it was read.
func stampToken(attr []byte, ok bool, st *unix.Stat_t) (storage.Version, bool) {
	if !ok {
		return "", false
	}
	fields := strings.Fields(string(attr))
	if len(fields) != 3 || len(fields[0]) != 32 {
		return "", false
	}
	if _, err := hex.DecodeString(fields[0]); err != nil {
		return "", false
	}
	mtime, err1 := strconv.ParseInt(fields[1], 10, 64)
	size, err2 := strconv.ParseInt(fields[2], 10, 64)
	if err1 != nil || err2 != nil || mtime != mtimeNano(st) || size != st.Size {
		return "", false
	}
	return storage.Version(fields[0]), true
}

// contentVersion is the version of a file without a valid stamp: a hash of
// its bytes (128 bits of SHA-256), equal only for equal bytes.
func contentVersion(b []byte) storage.Version {
	sum := sha256.Sum256(b)
	return storage.Version(contentPrefix + hex.EncodeToString(sum[:16]))
}

// current reads the version stored at path, "" when the key is missing,
// and the device the file is on. Writers call it under the key's lock, so
// no writer of this package replaces the file meanwhile: a stat and a
// getxattr by path, without opening the file, tell the version of a file
// this package wrote. A file without a valid stamp (another tool's, or
// one another tool replaced between the two calls) is read and hashed, as
// Get does.
func current(path string) (storage.Version, uint64, error) {
	var st unix.Stat_t
	if err := eintr(func() error { return unix.Stat(path, &st) }); err != nil {
		if notFound(err) {
			return "", 0, nil
		}
		return "", 0, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if isDir(&st) {
		return "", 0, nil
	}
	var buf [maxStampLen]byte
	n, ok, err := getAttrAt(path, buf[:])
	if err != nil && !notFound(err) {
		return "", 0, err
	}
	if tok, valid := stampToken(buf[:n], ok, &st); valid {
		return tok, uint64(st.Dev), nil //nolint:unconvert // int32 on some systems
	}
	_, v, err := readValue(path)
	if notFound(err) {
		return "", 0, nil
	}
	return v, uint64(st.Dev), err //nolint:unconvert // int32 on some systems
}

// Put implements driver.Store.
func (s *fileDriver) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	path := s.path(key)
	epoch := s.sync.epoch()
	unlock, err := s.locks.lock(ctx, key, path)
	for tries := 0; errors.Is(err, fs.ErrNotExist) && tries < mkdirTries; tries++ {
		// A lock file beside the key (not on Linux) needs its directory;
		// but no directory, no value: IfMatch fails without making one.
		// A deletion may remove the directory again before the lock file
		// is made in it: then it is made again.
		if cond.Kind() == driver.MatchVersion {
			return "", &storage.OpError{Op: "put", Key: key, Kind: storage.ErrPreconditionFailed}
		}
		if err := s.mkdirs(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", &storage.OpError{Op: "put", Key: key, Cause: err}
		}
		unlock, err = s.locks.lock(ctx, key, path)
	}
	if err != nil {
		return "", opErr("put", key, err)
	}
	defer unlock()
	// An unconditional write holds whatever is there: it need not look.
	if cond.Kind() != driver.Unconditional {
		cur, _, err := current(path)
		if err != nil {
			return "", &storage.OpError{Op: "put", Key: key, Cause: err}
		}
		if !cond.Holds(cur) {
			return "", &storage.OpError{Op: "put", Key: key, Kind: storage.ErrPreconditionFailed}
		}
	}
	ver := newToken()
	if err := s.writeAtomic(key, path, ver, value, epoch); err != nil {
		return "", err
	}
	return ver, nil
}

// Delete implements driver.Store.
func (s *fileDriver) Delete(ctx context.Context, key string, cond storage.Condition) error {
	path := s.path(key)
	epoch := s.sync.epoch()
	unlock, err := s.locks.lock(ctx, key, path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil // no directory for a lock file beside the key: no key
		unlock = func() {}
	}
	if err != nil {
		return opErr("delete", key, err)
	}
	defer unlock()
	cur, dev, err := current(path)
	if err != nil {
		return &storage.OpError{Op: "delete", Key: key, Cause: err}
	}
	if !cond.Holds(cur) {
		return &storage.OpError{Op: "delete", Key: key, Kind: storage.ErrPreconditionFailed}
	}
	if cur == "" {
		s.locks.x.remove(path)
		s.prune(filepath.Dir(path))
		return nil
	}
	if err := eintr(func() error { return unix.Unlink(path) }); err != nil {
		return &storage.OpError{Op: "delete", Key: key, Cause: &fs.PathError{Op: "remove", Path: path, Err: err}}
	}
	s.locks.x.remove(path)
	if err := s.sync.do(&syncReq{fd: -1, dir: filepath.Dir(path), dev: dev}); err != nil {
		return &storage.OpError{Op: "delete", Key: key, Kind: storage.ErrOutcomeUnknown, Cause: err}
	}
	if s.sync.failedSince(epoch) {
		return &storage.OpError{Op: "delete", Key: key, Kind: storage.ErrOutcomeUnknown, Cause: errSyncFailed}
	}
	s.prune(filepath.Dir(path))
	return nil
}

// mkdirTries bounds how often a write makes its key's directory again
// after a deletion removed it, empty, in between: each time another
// deletion must have emptied and removed it, which does not go on.
const mkdirTries = 16

// prune removes dir and its parents, up to the root, while they are empty:
// rmdir(2) refuses a directory that holds anything (a key, another key's
// write in progress, a lock file), so a concurrent writer keeps its
// directory, or finds it gone before its temporary file is made and makes
// it again. Left undone, it costs nothing but a directory; it is not
// synced, as an empty directory that comes back after a crash is harmless.
func (s *fileDriver) prune(dir string) {
	for dir != s.root && strings.HasPrefix(dir, s.root+string(filepath.Separator)) {
		if eintr(func() error { return unix.Rmdir(dir) }) != nil {
			return // not empty (or gone): so are its parents, or someone else prunes them
		}
		dir = filepath.Dir(dir)
	}
}

func opErr(op, key string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &storage.OpError{Op: op, Key: key, Kind: err}
	}
	return &storage.OpError{Op: op, Key: key, Cause: err}
}

// ListAfter implements driver.Store. It walks the directories in key
// order, from the deepest one the prefix names, and yields as it goes:
// memory holds the names of one directory per level. A directory is opened
// only if it can hold a key with the prefix after the cursor, so the
// subtrees wholly before after cost nothing but their one name in their
// parent's listing.
//
// A directory on after's own path (the cursor inside it) would have to be
// read whole: on Linux, one of at least 1,000 entries is indexed instead
// (its sorted names, kept exact with inotify; at most 4 directories per
// Store, the least recently listed dropped first), and a listing seeks in
// the index: it costs a read of the inotify queue, a stat of the directory
// and one fstatat per name changed since the last listing, then what it
// yields, whatever the size of the directory. The first such listing reads
// the directory twice (once to find it large, once to index it), and so
// does a listing after the index was dropped (an overflowed inotify queue,
// the directory removed or replaced). A listing of an indexed directory
// without a cursor uses the index too. Elsewhere, and without an index, a
// cursor in a directory of n entries reads n names (no stat, no sort of
// the skipped ones) before it yields. Either way a listing reflects every
// write and delete that completed before it began, by any process. A
// directory it finds empty (a process killed between a deletion's unlink
// and its prune left it) it removes, as the deletion would have.
func (s *fileDriver) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		dir := ""
		if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
			dir = prefix[:i+1]
		}
		l := lister{s: s, ctx: ctx, prefix: prefix, after: after, yield: yield}
		if err := l.walk(dir); err != nil && !errors.Is(err, errListStopped) {
			yield("", opErr("list", prefix, err))
		}
	}
}

// errListStopped ends a walk whose caller stopped iterating.
var errListStopped = errors.New("filestore: list stopped by its caller")

// indexPage is how many names a listing copies out of an index at a time.
const indexPage = 256

// lister is one ListAfter's walk.
type lister struct {
	s             *fileDriver
	ctx           context.Context
	prefix, after string
	yield         func(string, error) bool
}

// listItem is a directory entry as a key (file) or a key prefix ending in
// "/" (directory): sorting those strings sorts the keys under them, since
// every key below a directory starts with its name and a "/".
type listItem struct {
	key string
	dir bool
}

// walk yields the keys in the directory whose keys start with dir ("" for
// the root, else ending in "/"), in order: from the directory's index if
// it has one, else by reading it.
func (l *lister) walk(dir string) error {
	path := filepath.Join(l.s.root, filepath.FromSlash(dir))
	// The cursor inside dir: what sorts before it is skipped, and that is
	// what an index saves.
	cursorIn := len(l.after) > len(dir) && strings.HasPrefix(l.after, dir)
	done, last, err := l.walkIndexed(dir)
	if done || err != nil {
		return err
	}
	f, err := openDir(path)
	if f == nil {
		return err
	}
	tried := false
	if last == "" && cursorIn {
		if f, last, tried, err = l.tryIndex(dir, path, f); f == nil {
			return err
		}
	}
	ents, err := f.ReadDir(-1)
	_ = f.Close() // read-only: closing loses nothing
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(ents) == 0 && err == nil && dir != "" {
		// Empty: a process killed between a deletion's unlink and its prune
		// left it (or a write between its mkdir and its file). No key
		// names it, so only a listing meets it; rmdir removes it only
		// while it is still empty, as prune does after a deletion.
		l.s.prune(path)
		return nil
	}
	if last == "" && cursorIn && !tried && len(ents) >= indexMin {
		// Large, though its size did not say so: indexed for the next
		// listings (a second read); this one goes on with what it read.
		if f, err := os.Open(path); err == nil {
			if f, _, _, _ = l.s.dirs.build(dir, path, f); f != nil {
				_ = f.Close()
			}
		}
	}
	return l.visitEntries(dir, last, ents)
}

// openDir opens the directory at path for reading; nil and no error when
// it is gone (removed while walking, or no such prefix).
func openDir(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return nil, nil
		}
		return nil, err
	}
	return f, nil
}

// tryIndex reads dir under a watch, once, when its size says it may be
// large, and indexes it if it is; the listing then goes on from the index
// (or from the names read, if it was not). It returns the directory, open
// again, to read on after last, or nil when the walk of dir is over (with
// its error); tried is whether it tried.
func (l *lister) tryIndex(dir, path string, f *os.File) (next *os.File, last string, tried bool, err error) {
	var names []string
	var indexed, done bool
	f, names, indexed, tried = l.s.dirs.try(dir, path, f)
	switch {
	case indexed:
		if done, last, err = l.walkIndexed(dir); done || err != nil {
			return nil, "", tried, err
		}
	case names != nil:
		return nil, "", tried, l.walkNames(dir, names)
	}
	if f == nil { // taken by try: read again
		f, err = openDir(path)
	}
	return f, last, tried, err
}

// visitEntries visits, in order, the entries of dir read from the
// directory that sort after last and can hold or be a key the listing
// wants.
func (l *lister) visitEntries(dir, last string, ents []os.DirEntry) error {
	var items []listItem
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".cnv") {
			continue // lock and temporary files and folders
		}
		switch {
		case e.IsDir():
			k := dir + name + "/"
			if l.wantDir(k) && (last == "" || k > dir+last) {
				items = append(items, listItem{k, true})
			}
		case e.Type().IsRegular():
			if k := dir + name; l.wantKey(k) && (last == "" || k > dir+last) {
				items = append(items, listItem{k, false})
			}
		}
	}
	slices.SortFunc(items, func(a, b listItem) int { return strings.Compare(a.key, b.key) })
	for _, it := range items {
		if err := l.visit(it.key, it.dir); err != nil {
			return err
		}
	}
	return nil
}

// wantDir reports whether the directory of keys k ("a/b/") can hold a key
// with the prefix after the cursor.
func (l *lister) wantDir(k string) bool {
	mayHold := strings.HasPrefix(k, l.prefix) || strings.HasPrefix(l.prefix, k)
	return mayHold && (k > l.after || strings.HasPrefix(l.after, k))
}

// wantKey reports whether the key k is to be yielded.
func (l *lister) wantKey(k string) bool { return strings.HasPrefix(k, l.prefix) && k > l.after }

// visit yields the key k, or walks the directory k.
func (l *lister) visit(k string, dir bool) error {
	if err := l.ctx.Err(); err != nil {
		return err
	}
	if dir {
		return l.walk(k)
	}
	if !l.yield(k, nil) {
		return errListStopped
	}
	return nil
}

// walkIndexed walks dir from its index, a page of names at a time.
// done is false when dir has no index, or lost it on the way: then last is
// the name (relative to dir) of the last entry visited, "" for none, for
// the read of the directory to go on after.
func (l *lister) walkIndexed(dir string) (done bool, last string, err error) {
	if !l.s.dirs.has(dir) {
		return false, "", nil
	}
	return l.walkPages(dir, func(bound string, inclusive, first bool) ([]string, bool) {
		return l.s.dirs.page(dir, bound, inclusive, first, indexPage)
	})
}

// walkNames walks dir from its sorted names (relative, as in an index).
func (l *lister) walkNames(dir string, names []string) error {
	sn := sortedNames{names: names}
	_, _, err := l.walkPages(dir, func(bound string, inclusive, _ bool) ([]string, bool) {
		i := sn.seek(bound, inclusive)
		return names[i:min(len(names), i+indexPage)], true
	})
	return err
}

// walkPages walks dir a page of sorted names at a time, from the first
// name that can hold a key with the prefix after the cursor; page returns
// the names from bound on (first: the listing's first page of dir), false
// when it has none to give any more (see walkIndexed).
func (l *lister) walkPages(dir string, page func(bound string, inclusive, first bool) ([]string, bool)) (done bool, last string, err error) {
	bound := max(boundIn(dir, l.after), boundIn(dir, l.prefix))
	inclusive := true
	for first := true; ; first = false {
		names, ok := page(bound, inclusive, first)
		if !ok {
			return false, last, nil
		}
		if len(names) == 0 {
			return true, last, nil
		}
		for _, name := range names {
			k := dir + name
			isDir := strings.HasSuffix(name, "/")
			if k > l.prefix && !strings.HasPrefix(k, l.prefix) {
				return true, last, nil // past every key with the prefix
			}
			if isDir && l.wantDir(k) || !isDir && l.wantKey(k) {
				if err := l.visit(k, isDir); err != nil {
					return true, last, err
				}
			}
			last = name
		}
		bound, inclusive = last, false
	}
}

// mkdirs creates the directories the key's file lives in, fsyncing each
// parent whose entries changed so the new directories survive a crash.
func (s *fileDriver) mkdirs(key string) error {
	dir := s.root
	segs := strings.Split(key, "/")
	for _, seg := range segs[:len(segs)-1] {
		parent := dir
		dir = filepath.Join(dir, seg)
		err := os.Mkdir(dir, 0o755)
		switch {
		case err == nil:
			fi, err := os.Stat(parent)
			if err != nil {
				return err
			}
			if err := s.sync.do(&syncReq{fd: -1, dir: parent, dev: devOf(fi)}); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
		default:
			return err
		}
	}
	return nil
}

func newToken() storage.Version {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24
	return storage.Version(hex.EncodeToString(b[:]))
}

// errSyncFailed fails a write during which a sync of the store failed:
// that sync may have been the one to report this write's lost data.
var errSyncFailed = errors.New("filestore: a sync failed while the write was in flight")

// createTemp creates a temporary file for a write of key in dir, named
// after token (random, so names do not collide; a leftover of the same
// name, which a crash could only leave by a one-in-2^64 chance, is
// answered with another name). The key's directory is created if missing.
func (s *fileDriver) createTemp(key, dir string, token storage.Version) (int, string, error) {
	name := string(token[:16])
	made, clashes := 0, 0
	for {
		tmp := filepath.Join(dir, tempPrefix+name)
		fd, err := openFd(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		switch {
		case err == nil:
			return fd, tmp, nil
		case errors.Is(err, fs.ErrExist) && clashes < 2:
			name = string(newToken()[:16])
			clashes++
		case errors.Is(err, fs.ErrNotExist) && made < mkdirTries:
			// The key's directory is new (made only when the file
			// cannot be created for want of it), or a deletion that
			// emptied it removed it since it was made (prune): make it
			// again.
			if err := s.mkdirs(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return -1, "", err
			}
			made++
		case errors.Is(err, fs.ErrExist):
			return -1, "", &fs.PathError{Op: "open", Path: tmp, Err: unix.EEXIST}
		default:
			return -1, "", err
		}
	}
}

// writeAtomic replaces the file at path (key's) with value, stamped with
// token: temp file in the same directory, value, stamp, sync, rename, sync
// the directory; the two syncs go through s.sync, which shares them with
// concurrent writers. The stamp is set before the rename, so the file is
// never visible at the key without it. epoch is s.sync's when the write
// began. An error before the rename leaves the key as it was; one after it
// matches storage.ErrOutcomeUnknown: the new value is at the key, and may
// or may not survive a crash. System calls, for a key whose directory
// exists: open, write, fstat, fsetxattr, close, rename, and the syncs'
// share.
func (s *fileDriver) writeAtomic(key, path string, token storage.Version, value []byte, epoch uint64) (err error) {
	dir := filepath.Dir(path)
	fd, tmp, err := s.createTemp(key, dir, token)
	if err != nil {
		return &storage.OpError{Op: "put", Key: key, Cause: err}
	}
	open, renamed := true, false
	defer func() {
		if err != nil && !renamed {
			if open {
				_ = unix.Close(fd)
			}
			_ = unix.Unlink(tmp)
			err = &storage.OpError{Op: "put", Key: key, Cause: err}
		}
	}()
	if err = writeFd(fd, tmp, value); err != nil {
		return err
	}
	var st unix.Stat_t
	if err = fstatFd(fd, tmp, &st); err != nil {
		return err
	}
	if err = setAttr(fd, tmp, stamp(token, &st)); err != nil {
		return err
	}
	dev := uint64(st.Dev) //nolint:unconvert // int32 on some systems
	if err = s.sync.do(&syncReq{fd: fd, path: tmp, dev: dev}); err != nil {
		return err
	}
	if s.sync.failedSince(epoch) {
		return errSyncFailed
	}
	open = false
	if err = closeFd(fd, tmp); err != nil {
		return err
	}
	if err = renameFile(tmp, path); err != nil {
		return err
	}
	renamed = true
	if s.afterRename != nil {
		s.afterRename(key)
	}
	if err := s.sync.do(&syncReq{fd: -1, dir: dir, dev: dev}); err != nil {
		return &storage.OpError{Op: "put", Key: key, Kind: storage.ErrOutcomeUnknown, Cause: err}
	}
	if s.sync.failedSince(epoch) {
		return &storage.OpError{Op: "put", Key: key, Kind: storage.ErrOutcomeUnknown, Cause: errSyncFailed}
	}
	return nil
}
