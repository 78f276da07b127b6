// Package storeopen opens the store a program's flags name: the embedded
// SQLite file, a directory (filestore) or an S3 bucket. The Worker and the
// CLI share it, so both name stores alike.
package storeopen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/storage"
)

// The Worker's embedded stores (its -store flag).
const (
	SQLite = "sqlite" // one SQLite file, DBFile, in the data directory
	Files  = "files"  // the data directory itself, a file per record
)

// DBFile is the SQLite file's name in the Worker's data directory.
const DBFile = "conveyor.db"

// Embedded opens the Worker's store in dir, of kind SQLite or Files, and
// says which for the log. Asked for SQLite where dir holds a directory
// store and no SQLite file, it refuses, naming the store and how to keep
// using it, rather than start an empty one beside it. A dir holding files
// that no store of the Worker's writes there, and no store of the kind
// asked for, is refused too, naming them: -data most likely names the
// wrong directory, and a directory store would fail on the first write
// that meets one of them.
func Embedded(ctx context.Context, kind, dir string) (*storage.Store, string, error) {
	switch kind {
	case Files, SQLite:
	default:
		return nil, "", fmt.Errorf("-store %q: want %s or %s", kind, SQLite, Files)
	}
	c, err := readContents(dir)
	if err != nil {
		return nil, "", err
	}
	// Not filepath.Join: the message names paths as the user wrote them.
	trimmed := strings.TrimSuffix(dir, string(filepath.Separator))
	path := trimmed + string(filepath.Separator) + DBFile
	if kind == Files {
		if !c.dirStore() && len(c.foreign) > 0 {
			return nil, "", foreignError(dir, c.foreign, "its directory store (a folder per kind of record)")
		}
		s, err := filestore.New(dir)
		return s, "filestore " + dir, err
	}
	switch {
	case c.db:
	case c.dirStore():
		return nil, "", fmt.Errorf("%s holds a directory store (filestore: %s), not the SQLite file the Worker keeps by default (%s).\n"+
			"To keep using it as it is, add -store files.\n"+
			"To copy its records into SQLite: go run ./examples/conveyor copy -from dir:%s -to sqlite:%s, then run with -data %s",
			dir, strings.Join(firstFew(sortNames(append(slices.Clone(c.dirs), c.foreign...))), ", "), path, dir, trimmed+"-sqlite"+string(filepath.Separator)+DBFile,
			trimmed+"-sqlite")
	case len(c.foreign) > 0:
		return nil, "", foreignError(dir, c.foreign, "its SQLite file, "+path)
	}
	s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: path})
	where := "sqlite " + path
	switch {
	case len(c.dirs) > 0:
		where += " (" + dir + " also holds other files, a directory store's? -store files uses them)"
	case len(c.foreign) > 0:
		where += " (" + dir + " also holds " + strings.Join(firstFew(c.foreign), ", ") + ", not the store's)"
	}
	return s, where, err
}

// foreignError is the refusal of a data directory holding files of no
// store: what was found, and what to do.
func foreignError(dir string, foreign []string, keeps string) error {
	return fmt.Errorf("%s holds files that are not a Conveyor store (%s): the Worker keeps %s there.\n"+
		"Point -data at an empty or new directory (it is created), or move those files out of %s",
		dir, strings.Join(firstFew(foreign), ", "), keeps, dir)
}

// contents sorts a data directory's entries by whose they are.
type contents struct {
	db bool // the SQLite file
	// dirs are a directory store's: its folders (a key prefix each) and
	// the names its adapter keeps for itself (".cnv...", e.g. .cnvlocks).
	dirs []string
	// foreign are files no store of the Worker's writes at the top of
	// its directory: not the SQLite file or its companions (DBFile-wal,
	// -shm, -journal, ...), not a directory store's (whose records are
	// all in folders), and not hidden (.DS_Store, .gitkeep: other tools'
	// leavings, harmless beside a store).
	foreign []string
	marked  bool // an entry named ".cnv...": a directory store was opened here
}

// dirStore reports whether the entries are a directory store's: one was
// opened here (on Linux it leaves .cnvlocks), or only folders are there.
func (c contents) dirStore() bool {
	return c.marked || (len(c.dirs) > 0 && len(c.foreign) == 0)
}

// readContents sorts dir's entries (none if dir is missing) by whose
// they are, each list sorted with hidden names last.
func readContents(dir string) (contents, error) {
	var c contents
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return c, fmt.Errorf("%s is a file, not a directory: -data names the directory the Worker keeps its store in (created if missing)", dir)
	}
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	for _, e := range entries {
		switch n := e.Name(); {
		case n == DBFile:
			c.db = true
		case strings.HasPrefix(n, DBFile+"-"):
		case strings.HasPrefix(n, ".cnv"):
			c.marked = true
			c.dirs = append(c.dirs, n)
		case e.IsDir():
			c.dirs = append(c.dirs, n)
		case !strings.HasPrefix(n, "."):
			c.foreign = append(c.foreign, n)
		}
	}
	sortNames(c.dirs)
	sortNames(c.foreign)
	return c, nil
}

// sortNames sorts names in place, hidden ones last, and returns them.
func sortNames(names []string) []string {
	slices.SortFunc(names, func(a, b string) int {
		if ha, hb := strings.HasPrefix(a, "."), strings.HasPrefix(b, "."); ha != hb {
			if ha {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	return names
}

// firstFew is names, at most 3 and "..." after them.
func firstFew(names []string) []string {
	if len(names) > 3 {
		return append(slices.Clone(names[:3]), "...")
	}
	return names
}

// S3 names a bucket; the rest of its configuration comes from the
// environment (s3store.ConfigFromEnv).
type S3 struct {
	Bucket, Prefix string
	// Endpoint, when set, is the S3 API URL (path-style), or the
	// comma-separated URLs of a MinIO cluster's nodes.
	Endpoint string
	Settle   time.Duration
	Log      *slog.Logger
	// CheckWait is how long to wait for a server that does not answer yet.
	CheckWait time.Duration
}

// Config is o's s3store configuration.
func (o S3) Config() (s3store.Config, error) {
	cfg, err := s3store.ConfigFromEnv()
	if err != nil && os.Getenv("CONVEYOR_S3_BUCKET") != "" {
		return cfg, err
	}
	cfg.Bucket, cfg.Prefix, cfg.Settle, cfg.Logger, cfg.CheckWait = o.Bucket, o.Prefix, o.Settle, o.Log, o.CheckWait
	if o.Endpoint != "" {
		cfg.Endpoint, cfg.Endpoints, cfg.UsePathStyle = o.Endpoint, nil, true
	}
	if cfg.Endpoint == "" && (os.Getenv("AWS_ENDPOINT_URL_S3") != "" || os.Getenv("AWS_ENDPOINT_URL") != "") {
		cfg.UsePathStyle = true
	}
	return cfg, nil
}

// OpenS3 opens the bucket o names and checks it: a program on a bucket it
// cannot use would fail every call; Check says why at once, waiting
// CheckWait for a server that does not answer yet.
func OpenS3(ctx context.Context, o S3) (*storage.Store, string, error) {
	cfg, err := o.Config()
	if err != nil {
		return nil, "", err
	}
	s, err := s3store.NewDriver(ctx, cfg)
	if err != nil {
		return nil, "", err
	}
	if err := s.Check(ctx); err != nil {
		if errors.Is(err, s3store.ErrNoBucket) {
			err = fmt.Errorf("%w.\nTo create it: %s", err, CreateBucketCommand(o))
		}
		return nil, "", err
	}
	where := "s3 bucket " + cfg.Bucket
	if d := s.Settle(); d > 0 {
		where += fmt.Sprintf(" (a cluster: settles within %s)", d)
	}
	return storage.New(s), where, nil
}

// CreateBucketCommand is the command line that creates o's bucket.
func CreateBucketCommand(o S3) string {
	cmd := "go run ./examples/conveyor bucket create -s3-bucket " + o.Bucket
	if o.Endpoint != "" {
		cmd += " -s3-endpoint " + o.Endpoint
	}
	return cmd
}

// CreateBucket creates the bucket o names (one the caller already has is
// no error) and checks it as OpenS3 does.
func CreateBucket(ctx context.Context, o S3) error {
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	d, err := s3store.NewDriver(ctx, cfg)
	if err != nil {
		return err
	}
	if err := d.CreateBucket(ctx); err != nil {
		return err
	}
	return d.Check(ctx)
}

// Usage describes the store names Open takes.
const Usage = "dir:PATH (a directory store), sqlite:PATH (a SQLite file), s3://BUCKET[/PREFIX/] (endpoint from -s3-endpoint or the environment), mem: (in memory, empty)"

// Open opens the store name names (see Usage); s3 supplies what a bucket
// needs besides its name and prefix.
func Open(ctx context.Context, name string, s3 S3) (*storage.Store, string, error) {
	scheme, rest, _ := strings.Cut(name, ":")
	switch {
	case scheme == "dir" && rest != "":
		s, err := filestore.New(rest)
		return s, "filestore " + rest, err
	case scheme == "sqlite" && rest != "":
		s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: rest})
		return s, "sqlite " + rest, err
	case scheme == "mem":
		return memstore.New(), "memory", nil
	case scheme == "s3" && strings.HasPrefix(rest, "//") && len(rest) > 2:
		s3.Bucket, s3.Prefix, _ = strings.Cut(rest[2:], "/")
		if s3.Prefix != "" && !strings.HasSuffix(s3.Prefix, "/") {
			s3.Prefix += "/"
		}
		return OpenS3(ctx, s3)
	}
	return nil, "", fmt.Errorf("store %q: want %s", name, Usage)
}
