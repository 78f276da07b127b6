//go:build unix

// Package filestore is a storage.Store in a local directory: the embedded
// default a Worker uses when no object store is configured. It survives
// restarts and may be shared by several processes on one machine.
//
// Layout: a key is a file path under the root, so a run folder reads like
// 003 §5.2; writers keep their lock and temporary files beside it:
//
//	<root>/agents/x/runs/r1/status.json              the value, with a header
//	<root>/agents/x/runs/r1/.cnvlock-status.json     flock(2) lock for writers
//	<root>/agents/x/runs/r1/.cnvtmp-*                a write in progress
//
// storage.ValidateKey refuses key segments starting with ".cnv", so these
// names can never be keys, and refuses "..", so no key leaves the root.
//
// A value file starts with the 38-byte header "cnv1 <32 hex>\n" carrying
// the version, a random 128-bit token drawn per write, followed by the
// value. Header and value are replaced together by rename(2), so a reader
// never sees one without the other, and rewriting identical bytes still
// changes the version.
//
// Writers take an exclusive flock on the key's lock file for the whole
// read-check-write, which makes conditional writes atomic across goroutines
// and processes; readers take no lock, because rename is atomic. Every
// write is fsync'd, then renamed, then the directory is fsync'd, so a
// completed Put survives a crash. Deleting a key leaves its lock file and
// directories behind; they are harmless and reused by the next write. flock
// needs a local file system; do not share the root over NFS.
package filestore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/runconveyor/conveyor/storage"
)

const (
	lockPrefix  = ".cnvlock-"
	tempPattern = ".cnvtmp-*"
	magic       = "cnv1 "
	headerLen   = len(magic) + 32 + 1
)

// Store is a storage.Store in a directory. Create it with New.
type Store struct {
	root string
}

var _ storage.Store = (*Store)(nil)

// New opens (creating if needed) the store rooted at dir. Several Stores,
// in one process or many, may share one dir.
func New(dir string) (*Store, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	return &Store{root: root}, nil
}

// Root is the absolute directory the store lives in.
func (s *Store) Root() string { return s.root }

func (s *Store) path(key string) string { return filepath.Join(s.root, filepath.FromSlash(key)) }

// Get implements storage.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if err := storage.CheckOp(ctx, "get", key); err != nil {
		return nil, "", err
	}
	b, err := os.ReadFile(s.path(key))
	if err != nil {
		if notFound(err) {
			return nil, "", storage.NewOpError("get", key, storage.ErrNotFound, err)
		}
		return nil, "", storage.NewOpError("get", key, nil, err)
	}
	v, value, err := parse(b)
	if err != nil {
		return nil, "", storage.NewOpError("get", key, nil, err)
	}
	return value, v, nil
}

func parse(b []byte) (storage.Version, []byte, error) {
	if len(b) < headerLen || !bytes.HasPrefix(b, []byte(magic)) || b[headerLen-1] != '\n' {
		return "", nil, errors.New("filestore: value file has no valid header")
	}
	return storage.Version(b[len(magic) : headerLen-1]), b[headerLen:], nil
}

// notFound reports whether err means no value is stored at a path: it
// does not exist, a parent is a file, or it is a directory of other keys.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

// current reads the version stored at path; "" when the key is missing.
func current(path string) (storage.Version, error) {
	f, err := os.Open(path)
	if notFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	var h [headerLen]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return "", err
	}
	v, _, err := parse(h[:])
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
	if err := s.mkdirs(key); err != nil {
		return "", storage.NewOpError("put", key, nil, err)
	}
	unlock, err := lock(ctx, path)
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
	ver := newVersion()
	if err := writeAtomic(path, ver, value); err != nil {
		return "", storage.NewOpError("put", key, nil, err)
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
	if _, err := os.Stat(path); notFound(err) {
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
	if err := syncDir(filepath.Dir(path)); err != nil {
		return storage.NewOpError("delete", key, nil, err)
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
			if err := syncDir(parent); err != nil {
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
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	wait := 50 * time.Microsecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, 5*time.Millisecond)
	}
}

func newVersion() storage.Version {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24
	return storage.Version(hex.EncodeToString(b[:]))
}

// writeAtomic replaces the file at path with header+value: temp file in the
// same directory, fsync, rename, fsync the directory.
func writeAtomic(path string, ver storage.Version, value []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPattern)
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.WriteString(magic + string(ver) + "\n"); err != nil {
		return err
	}
	if _, err = f.Write(value); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
