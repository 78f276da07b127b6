package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// op is one Put or Delete on its way through a commit.
type op struct {
	key   string
	value []byte
	del   bool
	cond  driver.Condition
	// The answer, set by the commit that ran the op before done is
	// signalled (or, for the leader's own op, before run returns).
	ver driver.Version
	err error
	// lead, set instead of an answer, hands the next commit to this op's
	// caller.
	lead bool
	done chan struct{}
}

func (o *op) error(what string) error {
	var oe *driver.OpError
	if errors.As(o.err, &oe) {
		return o.err
	}
	if errors.Is(o.err, storage.ErrPreconditionFailed) {
		return o.err
	}
	if errors.Is(o.err, storage.ErrOutcomeUnknown) {
		return &driver.OpError{Op: what, Key: o.key, Kind: storage.ErrOutcomeUnknown, Cause: o.err}
	}
	return &driver.OpError{Op: what, Key: o.key, Cause: o.err}
}

// committer runs the group commit. Why it is led by callers rather than a
// writer goroutine: a single writer (W=1) then commits on its own
// goroutine with no handoff, the cheapest path (a handoff to a writer
// goroutine measured twice the CPU per write); concurrent writers queue
// while one commit runs and the next leader takes the whole queue, so
// sixteen writers share a sync. Only the current leader touches the
// connection, so no lock is held across I/O but mu's few lines.
type committer struct {
	d       *sqlDriver
	mu      sync.Mutex
	busy    bool  // a leader is committing
	waiting []*op // writes for the next commit, in arrival order
	w       *writer
	closed  bool
}

// run commits o, alone or with the writes queued beside it, and leaves
// its answer in o.
func (c *committer) run(o *op) {
	c.mu.Lock()
	if c.busy {
		o.done = make(chan struct{}, 1)
		c.waiting = append(c.waiting, o)
		c.mu.Unlock()
		<-o.done
		if !o.lead {
			return
		}
		c.mu.Lock() // this caller leads now; o is still queued, first
	} else {
		c.busy = true
		c.waiting = append(c.waiting, o)
	}
	batch := c.waiting
	c.waiting = nil
	closed := c.closed
	c.mu.Unlock()

	if closed {
		for _, b := range batch {
			b.err = errClosed
		}
	} else {
		c.commit(batch)
	}
	for _, b := range batch {
		if b != o {
			b.done <- struct{}{}
		}
	}

	c.mu.Lock()
	if len(c.waiting) > 0 {
		next := c.waiting[0]
		next.lead = true
		next.done <- struct{}{}
	} else {
		c.busy = false
		if c.closed {
			c.closeWriter()
		}
	}
	c.mu.Unlock()
}

var errClosed = errors.New("sqlitestore: closed")

// commit runs batch in one transaction on the write connection, opening
// it if needed. Writes that fail before COMMIT wrote nothing and get the
// error; a failed COMMIT may have landed, so its writes get
// storage.ErrOutcomeUnknown and the connection is reopened.
func (c *committer) commit(batch []*op) {
	if c.w == nil {
		w, err := openWriter(c.d)
		if err != nil {
			fail(batch, err)
			return
		}
		c.w = w
	}
	keys, err := c.w.apply(batch)
	if err == nil {
		if len(keys) == 0 {
			return
		}
		c.d.commits.Add(1)
		c.d.watches.signal(keys, false)
		return
	}
	// Whatever happened, start from a fresh connection next time.
	c.w.close()
	c.w = nil
	fail(batch, err)
}

func fail(batch []*op, err error) {
	for _, b := range batch {
		b.ver, b.err = "", err
	}
}

// close closes the write connection now, or when the commit running ends.
func (c *committer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if !c.busy {
		c.closeWriter()
	}
}

func (c *committer) closeWriter() {
	if c.w != nil {
		c.w.close()
		c.w = nil
	}
}

// writer is the write connection and its prepared statements.
type writer struct {
	d    *sqlDriver
	db   *sql.DB
	conn *sql.Conn
	turn *turn
	// statements, prepared once on conn
	version, upsert, remove, logChange, prune, getSeq, setSeq *sql.Stmt
}

func openWriter(d *sqlDriver) (*writer, error) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", d.dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	w := &writer{d: d, db: db}
	if w.turn, err = openTurn(d.cfg.Path); err != nil {
		_ = db.Close()
		return nil, err
	}
	if w.conn, err = db.Conn(ctx); err != nil {
		w.turn.close()
		_ = db.Close()
		return nil, err
	}
	// This connection waits for the write lock in begin, not in SQLite's
	// busy handler, whose sleeps (1 ms growing to 100 ms) let a busy
	// process keep the lock.
	if _, err := w.conn.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		w.close()
		return nil, err
	}
	for _, p := range []struct {
		s **sql.Stmt
		q string
	}{
		{&w.version, "SELECT version FROM kv WHERE key = ?"},
		{&w.upsert, "INSERT INTO kv (key, value, version) VALUES (?, ?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = excluded.version"},
		{&w.remove, "DELETE FROM kv WHERE key = ?"},
		{&w.logChange, "INSERT INTO changes (seq, key, writer) VALUES (?, ?, ?)"},
		{&w.prune, "DELETE FROM changes WHERE seq <= ?"},
		{&w.getSeq, "SELECT value FROM meta WHERE name = 'seq'"},
		{&w.setSeq, "UPDATE meta SET value = ? WHERE name = 'seq'"},
	} {
		if *p.s, err = w.conn.PrepareContext(ctx, p.q); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

// close releases the connection; the statements first, since SQLite
// keeps a connection with live statements (and its transaction) open.
func (w *writer) close() {
	for _, st := range []*sql.Stmt{w.version, w.upsert, w.remove, w.logChange, w.prune, w.getSeq, w.setSeq} {
		if st != nil {
			_ = st.Close()
		}
	}
	_ = w.conn.Close()
	_ = w.db.Close()
	w.turn.close()
}

// begin takes the write lock in turn with other processes (see turn) and
// starts an IMMEDIATE transaction, retrying every ~50µs while a writer
// outside the turns holds SQLite's lock (a sqlite3 shell), up to
// BusyTimeout.
func (w *writer) begin(ctx context.Context) error {
	if err := w.turn.acquire(); err != nil {
		return err
	}
	var deadline time.Time
	for {
		_, err := w.conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		if err == nil {
			return nil
		}
		if !isBusy(err) {
			w.turn.release()
			return err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(w.d.cfg.BusyTimeout)
		} else if time.Now().After(deadline) {
			w.turn.release()
			return err
		}
		time.Sleep(time.Duration(25+rand.IntN(50)) * time.Microsecond)
	}
}

// apply runs batch in one IMMEDIATE transaction, each write's condition
// checked against the state the writes before it left, and returns the
// keys written. A batch that writes nothing is rolled back: no sync.
func (w *writer) apply(batch []*op) ([]string, error) {
	// Not the callers' contexts: one caller giving up must not abort the
	// others' commit. busy_timeout bounds the wait for the lock.
	ctx := context.Background()
	if err := w.begin(ctx); err != nil {
		return nil, err
	}
	defer w.turn.release()
	keys, err := w.stage(ctx, batch)
	if err != nil || len(keys) == 0 {
		if _, rerr := w.conn.ExecContext(ctx, "ROLLBACK"); rerr != nil && err == nil {
			err = rerr
		}
		return nil, err
	}
	if w.d.beforeCommit != nil {
		w.d.beforeCommit(w.conn)
	}
	if _, err := w.conn.ExecContext(ctx, "COMMIT"); err != nil {
		return nil, errors.Join(storage.ErrOutcomeUnknown, err)
	}
	return keys, nil
}

// stage writes batch inside the open transaction.
func (w *writer) stage(ctx context.Context, batch []*op) ([]string, error) {
	var seq int64
	if err := w.getSeq.QueryRowContext(ctx).Scan(&seq); err != nil {
		return nil, err
	}
	first := seq
	var keys []string
	for _, o := range batch {
		var cur int64
		err := w.version.QueryRowContext(ctx, o.key).Scan(&cur)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		var curV driver.Version
		if err == nil {
			curV = formatVersion(cur)
		}
		o.ver, o.err = "", nil
		switch {
		case !o.cond.Holds(curV):
			o.err = storage.ErrPreconditionFailed
			continue
		case o.del && curV == "":
			continue // deleting a missing key changes nothing
		}
		seq++
		if o.del {
			_, err = w.remove.ExecContext(ctx, o.key)
		} else {
			_, err = w.upsert.ExecContext(ctx, o.key, o.value, seq)
			o.ver = formatVersion(seq)
		}
		if err == nil {
			_, err = w.logChange.ExecContext(ctx, seq, o.key, w.d.id)
		}
		if err != nil {
			return nil, err
		}
		keys = append(keys, o.key)
	}
	if seq == first {
		return nil, nil
	}
	if seq/pruneEvery != first/pruneEvery && seq > keepTail {
		if _, err := w.prune.ExecContext(ctx, seq-keepTail); err != nil {
			return nil, err
		}
	}
	_, err := w.setSeq.ExecContext(ctx, seq)
	return keys, err
}
