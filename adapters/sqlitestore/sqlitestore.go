// Package sqlitestore is a storage.Store in one SQLite file on a local
// disk, on modernc.org/sqlite (pure Go: no cgo). Several processes on one
// machine may share the file; it is not for a network file system.
//
// The file runs in WAL mode with synchronous=FULL, so a write is durable
// when it returns. Each connection sets busy_timeout before anything else,
// so a process waits for another's commit instead of failing. The file
// holds three tables: meta (the schema version, so a later release can
// migrate, and the last version issued), kv (key, value, version: a
// rowid table, its keys in their own index) and changes (a bounded log
// of the keys each version wrote, which watchers follow). Beside it: SQLite's -wal and -shm, and -lock,
// -turn, -bell-lock and -bell-turn (two FIFOs, left after Close), by which
// processes take turns at writing (SQLite's busy handler alone let one
// process starve another).
//
// Versions are decimal numbers from one sequence kept in the file and
// advanced in the same transaction as the write, so a version is never
// issued twice, for any key, even across a delete and re-create or by
// another process: no A-B-A.
//
// Writes commit in groups led by their callers: a write that finds no
// commit in progress commits at once on its own goroutine; writes that
// arrive meanwhile wait and share the next commit, one sync for all. Each
// write's condition is checked, in arrival order, against the state its
// batch has reached, and each gets its own answer. A Commit of several
// writes travels as one: all its conditions are checked, then all its
// writes applied, or none. A commit that fails answers
// storage.ErrOutcomeUnknown to its writes and reopens the database.
//
// Watch signals the watchers of this Store when it commits, at once, and
// notices other processes' commits by polling SQLite's data_version (a
// cheap counter) on one connection, then reading the change log past this
// Store's own versions.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Config says where the database is and how long it waits.
type Config struct {
	// Path is the database file (required; it must not contain '?').
	// It and its directory are created if missing. SQLite keeps two more
	// files beside it while open (-wal and -shm).
	Path string
	// BusyTimeout bounds how long an operation waits while another
	// process holds the write lock or creates the schema. Default 5s. A
	// write that gives up then, or when its context ends first, wrote
	// nothing and says so with a *BusyError.
	BusyTimeout time.Duration
	// WatchInterval is how often watchers check for other processes'
	// commits; this Store's own commits signal them at once. Default 10ms.
	WatchInterval time.Duration
}

const (
	schemaVersion = 1
	// listPage is how many keys ListAfter reads per query.
	listPage = 256
	// readConns is how many read connections (Get, ListAfter) are kept
	// open. Few: each drops its page cache at every commit (WAL), so
	// fewer connections re-read fewer pages, and a read holds one only
	// for a query (ListAfter releases it before yielding).
	readConns = 4
	// walCheckpointPages is how many pages the WAL grows to before a
	// commit copies them into the database file (SQLite's default is
	// 1000): the copy and its sync were 8% of a job's CPU at 1000, 4% at
	// 8000 (a page written by several commits is copied once); the WAL
	// takes up to 32 MiB on disk.
	walCheckpointPages = 8000
)

// The change log keeps at least keepTail entries and is pruned every
// pruneEvery versions, in the commit that crosses the mark: a watcher
// that falls further behind is told everything may have changed. (Vars
// for tests.)
var (
	keepTail   int64 = 4096
	pruneEvery int64 = 1024
)

// sqlDriver is the driver (package storage/driver) under the Store New
// returns.
type sqlDriver struct {
	cfg  Config
	dsn  string
	id   int64 // this handle's mark in the change log, so it skips its own commits
	read *sql.DB
	get  *sql.Stmt
	list [2]*sql.Stmt // keys >= ?, keys > ?

	c       committer
	watches watchSet

	// commits counts the transactions committed, for tests.
	commits atomic.Int64
	// beforeCommit, when set (by tests), runs before each COMMIT.
	beforeCommit func(*sql.Conn)
}

var (
	_ driver.Store     = (*sqlDriver)(nil)
	_ driver.Watcher   = (*sqlDriver)(nil)
	_ driver.Committer = (*sqlDriver)(nil)
)

// New opens (creating if needed) the database cfg names, waiting while
// another process creates it. Close the Store when done.
func New(ctx context.Context, cfg Config) (*storage.Store, error) {
	d, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return storage.New(d), nil
}

// NewDriver opens the database as New does and returns its driver (package
// storage/driver), for wrappers; it also implements driver.Watcher and
// io.Closer.
func NewDriver(ctx context.Context, cfg Config) (driver.Store, error) {
	d, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func open(ctx context.Context, cfg Config) (*sqlDriver, error) {
	if cfg.Path == "" || strings.Contains(cfg.Path, "?") {
		return nil, fmt.Errorf("sqlitestore: bad path %q", cfg.Path)
	}
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = 5 * time.Second
	}
	if cfg.WatchInterval <= 0 {
		cfg.WatchInterval = 10 * time.Millisecond
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o755); err != nil {
		return nil, err
	}
	d := &sqlDriver{cfg: cfg, id: rand.Int64N(1<<62) + 1}
	// busy_timeout first: the driver runs it before the other pragmas, so
	// a connection opened while another process holds the file waits.
	d.dsn = cfg.Path + "?_pragma=busy_timeout(" + strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10) +
		")&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=wal_autocheckpoint(" + strconv.Itoa(walCheckpointPages) + ")"
	d.c.d = d
	d.watches.d = d
	if err := d.initSchema(ctx); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", d.dsn)
	if err != nil {
		return nil, err
	}
	d.read = db
	// Kept open, not closed after each use (database/sql keeps 2 idle by
	// default): a connection opened per Get cost more than the Get.
	// One more for the watchers' poller, which keeps its own.
	db.SetMaxOpenConns(readConns + 1)
	db.SetMaxIdleConns(readConns + 1)
	for _, p := range []struct {
		s **sql.Stmt
		q string
	}{
		{&d.get, "SELECT value, version FROM kv WHERE key = ?"},
		{&d.list[0], "SELECT key FROM kv WHERE key >= ? ORDER BY key LIMIT " + strconv.Itoa(listPage)},
		{&d.list[1], "SELECT key FROM kv WHERE key > ? ORDER BY key LIMIT " + strconv.Itoa(listPage)},
	} {
		if *p.s, err = db.PrepareContext(ctx, p.q); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	return d, nil
}

// kvTable is a rowid table with its keys in an index, not a WITHOUT ROWID
// table keyed by them: a WITHOUT ROWID table is a B-tree of whole rows,
// interior pages included, so a row over about 1,000 bytes (a job record,
// an audit object) spills into an overflow page and a write of it can
// land on an interior page too; a rowid table keeps rows up to about
// 4,000 bytes in a leaf, and the key index holds only keys. A job's WAL
// pages went from about 14.3 to 8.7 (docs/performance.md). Every statement is
// the same on both, so the schema version stays 1: a file an earlier
// release made keeps its WITHOUT ROWID table and is read and written as
// it is, and an earlier release drives a file made now.
const kvTable = "CREATE TABLE IF NOT EXISTS kv (key TEXT NOT NULL PRIMARY KEY, value BLOB NOT NULL, version INTEGER NOT NULL)"

var schema = []string{
	"CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
	// A rowid table, its keys in an index: see kvTable.
	kvTable,
	"CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY, key TEXT NOT NULL, writer INTEGER NOT NULL)",
	"INSERT OR IGNORE INTO meta (name, value) VALUES ('schema', " + strconv.Itoa(schemaVersion) + "), ('seq', 0)",
}

// initSchema creates the tables if missing, in one transaction, and checks
// the schema version; a file that has them is only read. To create them it
// takes its turn at the write lock as writes do (a
// busy writer in another process would starve SQLite's busy handler), and
// retries while another process holds the file (creating it, or switching
// it to WAL), until BusyTimeout or ctx ends.
func (d *sqlDriver) initSchema(ctx context.Context) error {
	// A file whose schema exists needs no write lock: a process starting
	// beside busy writers would otherwise wait its turn among them.
	if v, ok := d.readSchema(ctx); ok {
		return d.checkSchema(v)
	}
	t, err := openTurn(d.cfg.Path)
	if err != nil {
		return err
	}
	defer t.close()
	start := time.Now()
	for {
		locked, err := t.try()
		if locked {
			err = d.tryInitSchema(ctx)
			t.release()
		}
		switch {
		case err != nil && !isBusy(err):
			return err
		case locked && err == nil:
			return nil
		case time.Since(start) > d.cfg.BusyTimeout:
			t.abandon()
			return &BusyError{Path: d.cfg.Path, Waited: time.Since(start)}
		}
		if ctx.Err() != nil {
			t.abandon()
			return &BusyError{Path: d.cfg.Path, Waited: time.Since(start), stop: ctx.Err()}
		}
		t.wait(poll)
	}
}

func (d *sqlDriver) tryInitSchema(ctx context.Context) error {
	db, err := sql.Open("sqlite", d.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	var v int
	err = func() error {
		for _, q := range schema {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return conn.QueryRowContext(ctx, "SELECT value FROM meta WHERE name = 'schema'").Scan(&v)
	}()
	if err == nil {
		_, err = conn.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		return err
	}
	return d.checkSchema(v)
}

// readSchema reads the schema version without a write lock; false when
// it cannot (no schema yet, or the file is busy being created).
func (d *sqlDriver) readSchema(ctx context.Context) (int, bool) {
	db, err := sql.Open("sqlite", d.dsn)
	if err != nil {
		return 0, false
	}
	defer db.Close()
	var v int
	err = db.QueryRowContext(ctx, "SELECT value FROM meta WHERE name = 'schema'").Scan(&v)
	return v, err == nil
}

// checkSchema refuses a file a newer release wrote.
func (d *sqlDriver) checkSchema(v int) error {
	if v > schemaVersion {
		return fmt.Errorf("sqlitestore: %s has schema version %d, newer than this release's %d", d.cfg.Path, v, schemaVersion)
	}
	return nil
}

// isBusy tells whether err is SQLite's "busy" or "locked": another
// connection holds what this one needs.
func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == 5 || c == 6 // SQLITE_BUSY, SQLITE_LOCKED
	}
	return false
}

// Close stops the watchers' poller and closes the database; the Store is
// not usable after.
func (d *sqlDriver) Close() error {
	d.watches.stop()
	d.c.close()
	return d.read.Close()
}

func formatVersion(v int64) driver.Version { return driver.Version(strconv.FormatInt(v, 10)) }

// opErr reports a backend failure, or the context's end if that caused it.
func opErr(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return &driver.OpError{Op: op, Key: key, Kind: cerr, Cause: err}
	}
	return &driver.OpError{Op: op, Key: key, Cause: err}
}

// Get implements driver.Store.
func (d *sqlDriver) Get(ctx context.Context, key string) ([]byte, driver.Version, error) {
	var value []byte
	var v int64
	err := d.get.QueryRowContext(ctx, key).Scan(&value, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, "", storage.ErrNotFound
	}
	if err != nil {
		return nil, "", opErr(ctx, "get", key, err)
	}
	if value == nil {
		value = []byte{}
	}
	return value, formatVersion(v), nil
}

// Put implements driver.Store.
func (d *sqlDriver) Put(ctx context.Context, key string, value []byte, cond driver.Condition) (driver.Version, error) {
	if value == nil {
		value = []byte{}
	}
	o := &op{ctx: ctx, key: key, value: value, cond: cond}
	d.c.run(o)
	if o.err != nil {
		return "", o.error("put")
	}
	return o.ver, nil
}

// Delete implements driver.Store.
func (d *sqlDriver) Delete(ctx context.Context, key string, cond driver.Condition) error {
	o := &op{ctx: ctx, key: key, del: true, cond: cond}
	d.c.run(o)
	if o.err != nil {
		return o.error("delete")
	}
	return nil
}

// Commit implements driver.Committer. The writes travel as one op through
// the group commit: their conditions are checked, in the transaction the
// op shares with others, against the state the ops before it left, and
// only if all hold are they applied, each at its own version from the
// sequence and each logged for watchers.
func (d *sqlDriver) Commit(ctx context.Context, writes []driver.Write) ([]driver.Version, error) {
	o := &op{ctx: ctx, key: writes[0].Key, multi: writes}
	d.c.run(o)
	if o.err != nil {
		return nil, o.error("commit")
	}
	return o.vers, nil
}

// ListAfter implements driver.Store. It reads the primary key a page at a
// time from the cursor (a seek), and stops at the first key past the
// prefix, so it costs what it yields.
func (d *sqlDriver) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		stmt, from := d.list[1], after
		if after == "" {
			stmt, from = d.list[0], prefix
		}
		for {
			keys, err := d.page(ctx, stmt, from)
			if err != nil {
				yield("", opErr(ctx, "list", prefix, err))
				return
			}
			for _, k := range keys {
				if !strings.HasPrefix(k, prefix) {
					return
				}
				if err := ctx.Err(); err != nil {
					yield("", opErr(ctx, "list", prefix, err))
					return
				}
				if !yield(k, nil) {
					return
				}
			}
			if len(keys) < listPage {
				return
			}
			stmt, from = d.list[1], keys[len(keys)-1]
		}
	}
}

// page reads one page of keys, releasing the connection before any is
// yielded.
func (d *sqlDriver) page(ctx context.Context, stmt *sql.Stmt, from string) ([]string, error) {
	rows, err := stmt.QueryContext(ctx, from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	keys := make([]string, 0, 16)
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}
