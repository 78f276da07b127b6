//go:build unix

// Package filestore is a storage.Store in a local directory: the embedded
// default a Worker uses when no object store is configured. It survives
// restarts and may be shared by several processes on one machine.
//
// Layout: a key is a file path under the root, so a run folder reads like
// 003 §5.2; writers keep their lock and temporary files beside it:
//
//	<root>/agents/x/runs/r1/status.json              exactly the value's bytes
//	<root>/agents/x/runs/r1/.cnvlock-status.json     flock(2) lock for writers
//	<root>/agents/x/runs/r1/.cnvtmp-*                a write in progress
//
// storage.ValidateKey refuses key segments starting with ".cnv", so these
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
// Writers take an exclusive flock on the key's lock file for the whole
// read-check-write, which makes conditional writes atomic across goroutines
// and processes. A writer waits for the lock by polling with LOCK_NB, so
// the wait ends when its context does, even if the holder is a paused
// process; locks are per key, so a paused holder delays only writers of its
// own key. A killed holder's lock is released by the kernel. Deleting a key
// leaves its lock file and directories behind; they are harmless and
// reused by the next write. flock needs a local file system; do not share
// the root over NFS.
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
// # Watching
//
// Store implements storage.Watcher with inotify on Linux (see Watch): a
// write by any process on the directory wakes the watchers of its key.
package filestore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/runconveyor/conveyor/storage"
)

const (
	lockPrefix  = ".cnvlock-"
	tempPattern = ".cnvtmp-*"
	// attrName is the extended attribute holding a value file's stamp.
	attrName = "user.conveyor.version"
	// contentPrefix starts the version of a file without a valid stamp; a
	// token is 32 hex digits, so the two kinds never collide.
	contentPrefix = "sha256-"
	// maxStampLen bounds a stamp: token, mtime and size in decimal.
	maxStampLen = 32 + 1 + 20 + 1 + 20
)

// Store is a storage.Store in a directory. Create it with New.
type Store struct {
	root string
	sync *syncer
	// afterRename, when set (by tests), runs after a Put's rename and
	// before the sync that makes it durable.
	afterRename func(key string)
}

var (
	_ storage.Store   = (*Store)(nil)
	_ storage.Watcher = (*Store)(nil)
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
// in one process or many, may share one dir.
func New(dir string, opts ...Option) (*Store, error) {
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
	// The root stays open for syncfs(2) while the Store lives; the
	// *os.File's finalizer closes it once the Store is unreachable.
	f, err := os.Open(root)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &Store{root: root, sync: &syncer{
		root:   f,
		dev:    devOf(fi),
		group:  !c.perWriteSync && syncfsReliable(),
		syncfs: syncfs,
		fsync:  fsyncFile,
	}}, nil
}

// probeAttr checks that files under root can carry the version attribute,
// so that a store which cannot keep versions fails at New, not at its
// first write.
func probeAttr(root string) error {
	f, err := os.CreateTemp(root, tempPattern)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := setAttr(f, []byte("probe")); err != nil {
		return fmt.Errorf("filestore: %s cannot hold versions: its file system has no user extended attributes: %w", root, err)
	}
	return nil
}

// Root is the absolute directory the store lives in.
func (s *Store) Root() string { return s.root }

func (s *Store) path(key string) string { return filepath.Join(s.root, filepath.FromSlash(key)) }

// Get implements storage.Store. It takes no lock: the value and its
// version are read through one open file, so they belong to one write.
func (s *Store) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if err := storage.CheckOp(ctx, "get", key); err != nil {
		return nil, "", err
	}
	f, fi, err := open(s.path(key))
	if err != nil {
		if notFound(err) {
			return nil, "", storage.NewOpError("get", key, storage.ErrNotFound, err)
		}
		return nil, "", storage.NewOpError("get", key, nil, err)
	}
	defer f.Close()
	b, v, err := readValue(f, fi)
	if err != nil {
		return nil, "", storage.NewOpError("get", key, nil, err)
	}
	return b, v, nil
}

// open opens the value file at path for reading and stats it; a directory
// (of other keys) is no value and gives EISDIR.
func open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.IsDir() {
		err = &fs.PathError{Op: "read", Path: path, Err: syscall.EISDIR}
	}
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// readValue reads the whole value file f, which stat described as fi, and
// its version. Another tool writing f in place during the read may leave
// torn bytes paired with the stamp's token; no compare-and-swap can use
// that token, as the file's mtime no longer matches its stamp.
func readValue(f *os.File, fi fs.FileInfo) ([]byte, storage.Version, error) {
	b, err := readAll(f, fi.Size())
	if err != nil {
		return nil, "", err
	}
	if int64(len(b)) == fi.Size() {
		tok, ok, err := stampToken(f, fi)
		if err != nil {
			return nil, "", err
		}
		if ok {
			return b, tok, nil
		}
	}
	return b, contentVersion(b), nil
}

// readAll reads f to its end, sized by the size stat reported.
func readAll(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, 0, size+1) // +1: see EOF without growing
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // the file grew meanwhile
		}
	}
}

// stamp is the value of a file's version attribute: the write's token and
// the mtime and size the file had when it was written, so that a later
// in-place change by another tool, which keeps the attribute, is noticed.
func stamp(token storage.Version, fi fs.FileInfo) []byte {
	return fmt.Appendf(nil, "%s %d %d", token, fi.ModTime().UnixNano(), fi.Size())
}

// stampToken returns the token of f's stamp if f has one that matches fi
// (the file as it was read).
func stampToken(f *os.File, fi fs.FileInfo) (storage.Version, bool, error) {
	var buf [maxStampLen]byte
	n, ok, err := getAttr(f, buf[:])
	if err != nil || !ok {
		return "", false, err
	}
	fields := strings.Fields(string(buf[:n]))
	if len(fields) != 3 || len(fields[0]) != 32 {
		return "", false, nil
	}
	if _, err := hex.DecodeString(fields[0]); err != nil {
		return "", false, nil
	}
	mtime, err1 := strconv.ParseInt(fields[1], 10, 64)
	size, err2 := strconv.ParseInt(fields[2], 10, 64)
	if err1 != nil || err2 != nil || mtime != fi.ModTime().UnixNano() || size != fi.Size() {
		return "", false, nil
	}
	return storage.Version(fields[0]), true, nil
}

// contentVersion is the version of a file without a valid stamp: a hash of
// its bytes (128 bits of SHA-256), equal only for equal bytes.
func contentVersion(b []byte) storage.Version {
	sum := sha256.Sum256(b)
	return storage.Version(contentPrefix + hex.EncodeToString(sum[:16]))
}

// notFound reports whether err means no value is stored at a path: it
// does not exist, a parent is a file, or it is a directory of other keys.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

// current reads the version stored at path; "" when the key is missing.
// Writers call it under the key's lock.
func current(path string) (storage.Version, error) {
	f, fi, err := open(path)
	if notFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	tok, ok, err := stampToken(f, fi)
	if err != nil || ok {
		return tok, err
	}
	// No valid stamp: hash the bytes, as Get does.
	_, v, err := readValue(f, fi)
	return v, err
}

// Put implements storage.Store.
func (s *Store) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if err := storage.CheckOp(ctx, "put", key); err != nil {
		return "", err
	}
	if err := storage.CheckCondition("put", key, cond); err != nil {
		return "", err
	}
	path := s.path(key)
	if cond.Kind() == storage.MatchVersion {
		// No file, no value: fail without creating directories.
		if _, err := os.Stat(path); notFound(err) {
			return "", storage.NewOpError("put", key, storage.ErrPreconditionFailed, nil)
		}
	}
	epoch := s.sync.epoch()
	// The key's directory almost always exists already: it is made only
	// when the lock file cannot be created for want of it.
	unlock, err := lock(ctx, path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := s.mkdirs(key); err != nil {
			return "", storage.NewOpError("put", key, nil, err)
		}
		unlock, err = lock(ctx, path)
	}
	if err != nil {
		return "", opErr("put", key, err)
	}
	defer unlock()
	cur, err := current(path)
	if err != nil {
		return "", storage.NewOpError("put", key, nil, err)
	}
	if !cond.Holds(cur) {
		return "", storage.NewOpError("put", key, storage.ErrPreconditionFailed, nil)
	}
	ver := newToken()
	if err := s.writeAtomic(key, path, ver, value, epoch); err != nil {
		return "", err
	}
	return ver, nil
}

// Delete implements storage.Store.
func (s *Store) Delete(ctx context.Context, key string, cond storage.Condition) error {
	if err := storage.CheckOp(ctx, "delete", key); err != nil {
		return err
	}
	if err := storage.CheckCondition("delete", key, cond); err != nil {
		return err
	}
	path := s.path(key)
	epoch := s.sync.epoch()
	fi, err := os.Stat(path)
	if notFound(err) {
		if cond.Kind() == storage.MatchVersion {
			return storage.NewOpError("delete", key, storage.ErrPreconditionFailed, nil)
		}
		return nil
	}
	unlock, err := lock(ctx, path)
	if err != nil {
		return opErr("delete", key, err)
	}
	defer unlock()
	cur, err := current(path)
	if err != nil {
		return storage.NewOpError("delete", key, nil, err)
	}
	if !cond.Holds(cur) {
		return storage.NewOpError("delete", key, storage.ErrPreconditionFailed, nil)
	}
	if cur == "" {
		return nil
	}
	if err := os.Remove(path); err != nil {
		return storage.NewOpError("delete", key, nil, err)
	}
	if err := s.sync.do(&syncReq{dir: filepath.Dir(path), dev: devOf(fi)}); err != nil {
		return storage.NewOpError("delete", key, storage.ErrOutcomeUnknown, err)
	}
	if s.sync.failedSince(epoch) {
		return storage.NewOpError("delete", key, storage.ErrOutcomeUnknown, errSyncFailed)
	}
	return nil
}

func opErr(op, key string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return storage.NewOpError(op, key, err, nil)
	}
	return storage.NewOpError(op, key, nil, err)
}

// List implements storage.Store. It walks the deepest directory the prefix
// names, collects the keys, sorts them and yields them; memory grows with
// the number of keys under that directory.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := storage.CheckPrefix(ctx, prefix); err != nil {
			yield("", err)
			return
		}
		base := s.root
		if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
			base = filepath.Join(s.root, filepath.FromSlash(prefix[:i]))
		}
		var keys []string
		err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed while walking, or no such prefix
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			name := d.Name()
			if d.IsDir() {
				if path != base && strings.HasPrefix(name, ".cnv") {
					return fs.SkipDir
				}
				return nil
			}
			if strings.HasPrefix(name, ".cnv") || !d.Type().IsRegular() {
				return nil // lock and temporary files
			}
			rel, err := filepath.Rel(s.root, path)
			if err != nil {
				return err
			}
			if key := filepath.ToSlash(rel); strings.HasPrefix(key, prefix) {
				keys = append(keys, key)
			}
			return nil
		})
		if err != nil {
			yield("", opErr("list", prefix, err))
			return
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := ctx.Err(); err != nil {
				yield("", storage.NewOpError("list", prefix, err, nil))
				return
			}
			if !yield(k, nil) {
				return
			}
		}
	}
}

// mkdirs creates the directories the key's file lives in, fsyncing each
// parent whose entries changed so the new directories survive a crash.
func (s *Store) mkdirs(key string) error {
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
			if err := s.sync.do(&syncReq{dir: parent, dev: devOf(fi)}); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
		default:
			return err
		}
	}
	return nil
}

// lock takes the writer lock of the key stored at path, polling so that ctx
// is honoured while another writer holds it. The returned func releases it.
func lock(ctx context.Context, path string) (func(), error) {
	lockPath := filepath.Join(filepath.Dir(path), lockPrefix+filepath.Base(path))
	// A bare descriptor, not an *os.File: the lock file is never read or
	// written, and an *os.File costs each write three more system calls
	// (the runtime poller's probe of a regular file).
	fd, err := syscall.Open(lockPath, syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: lockPath, Err: err}
	}
	wait := 50 * time.Microsecond
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(fd, syscall.LOCK_UN)
				_ = syscall.Close(fd)
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = syscall.Close(fd)
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = syscall.Close(fd)
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, 5*time.Millisecond)
	}
}

func newToken() storage.Version {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24
	return storage.Version(hex.EncodeToString(b[:]))
}

// errSyncFailed fails a write during which a sync of the store failed:
// that sync may have been the one to report this write's lost data.
var errSyncFailed = errors.New("filestore: a sync failed while the write was in flight")

// writeAtomic replaces the file at path (key's) with value, stamped with
// token: temp file in the same directory, value, stamp, sync, rename, sync
// the directory; the two syncs go through s.sync, which shares them with
// concurrent writers. The stamp is set before the rename, so the file is
// never visible at the key without it. epoch is s.sync's when the write
// began. An error before the rename leaves the key as it was; one after it
// matches storage.ErrOutcomeUnknown: the new value is at the key, and may
// or may not survive a crash.
func (s *Store) writeAtomic(key, path string, token storage.Version, value []byte, epoch uint64) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPattern)
	if err != nil {
		return storage.NewOpError("put", key, nil, err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if err != nil && !renamed {
			_ = f.Close()
			_ = os.Remove(tmp)
			err = storage.NewOpError("put", key, nil, err)
		}
	}()
	if _, err = f.Write(value); err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err = setAttr(f, stamp(token, fi)); err != nil {
		return err
	}
	dev := devOf(fi)
	if err = s.sync.do(&syncReq{file: f, dev: dev}); err != nil {
		return err
	}
	if s.sync.failedSince(epoch) {
		return errSyncFailed
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	renamed = true
	if s.afterRename != nil {
		s.afterRename(key)
	}
	if err := s.sync.do(&syncReq{dir: dir, dev: dev}); err != nil {
		return storage.NewOpError("put", key, storage.ErrOutcomeUnknown, err)
	}
	if s.sync.failedSince(epoch) {
		return storage.NewOpError("put", key, storage.ErrOutcomeUnknown, errSyncFailed)
	}
	return nil
}
