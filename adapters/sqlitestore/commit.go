package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/internal/origin"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// op is one Put or Delete, or one Commit of several (multi), on its way
// through a group commit.
type op struct {
	ctx   context.Context
	since time.Time // when its caller called
	key   string
	value []byte
	del   bool
	cond  driver.Condition
	// multi, for a Commit, holds its writes (key is the first's); vers
	// their versions once it landed.
	multi []driver.Write
	vers  []driver.Version
	// wrote is how many of the commit's keys (stage) are this op's.
	wrote int
	// state says who may touch the op next (see pending). The answer
	// (ver, err) is set by whoever moved it to claimed or withdrawn,
	// before done is signalled.
	state atomic.Int32
	ver   driver.Version
	err   error
	done  chan struct{}
}

// An op's states. A pending op is queued, or in a batch whose leader
// waits for the write lock: its caller may withdraw it (its context
// ended), and then nothing of it is written. The leader claims it before
// writing it, or to answer it early (its BusyTimeout passed); a claimed
// op's answer follows on done. Leading is handed to the first pending op
// when a commit ends: its caller leads the next one.
const (
	pending int32 = iota
	leading
	claimed
	withdrawn
)

func (o *op) error(what string) error {
	var be *BusyError
	switch {
	case errors.As(o.err, &be):
		// Never sent: the context's end is the kind; a BusyTimeout is a
		// cause the engines retry.
		return &driver.OpError{Op: what, Key: o.key, Kind: be.stop, Cause: be}
	case errors.Is(o.err, storage.ErrPreconditionFailed):
		return o.err
	case errors.Is(o.err, storage.ErrOutcomeUnknown):
		return &driver.OpError{Op: what, Key: o.key, Kind: storage.ErrOutcomeUnknown, Cause: o.err}
	}
	var oe *driver.OpError
	if errors.As(o.err, &oe) {
		return o.err
	}
	return &driver.OpError{Op: what, Key: o.key, Cause: o.err}
}

// BusyError is a write that gave up waiting for its turn to write the
// file: another process held the write lock, or this Store's earlier
// writes were ahead of it, until its context ended or Config.BusyTimeout
// passed. Nothing of the write was sent, so it can be retried. It is the
// cause of the storage.OpError the write returns, whose kind is the
// context's error when the context ended; after BusyTimeout it is the
// only cause, which storage.Transient judges worth retrying.
type BusyError struct {
	Path   string        // the database file
	Waited time.Duration // how long the write waited
	stop   error         // the context's error, or nil for BusyTimeout
}

// Unwrap returns the context's error, if that ended the wait.
func (e *BusyError) Unwrap() error { return e.stop }

func (e *BusyError) Error() string {
	why := "busy timeout"
	if e.stop != nil {
		why = e.stop.Error()
	}
	return fmt.Sprintf("sqlitestore: %s: gave up waiting %s for the write lock (%s); nothing was written",
		e.Path, e.Waited.Round(time.Millisecond), why)
}

// committer runs the group commit. Why it is led by callers rather than a
// writer goroutine: a single writer (W=1) then commits on its own
// goroutine with no handoff, the cheapest path (a handoff to a writer
// goroutine measured twice the CPU per write); concurrent writers queue
// while one commit runs and the next leader takes the whole queue, so
// sixteen writers share a sync. Only the current leader touches the
// connection, so no lock is held across I/O but mu's few lines. No caller
// waits past its context: a queued caller withdraws its write, and a
// leader whose context ends while it waits for the write lock hands its
// batch to the next caller in line.
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
	o.since = time.Now()
	c.mu.Lock()
	if c.busy {
		o.done = make(chan struct{}, 1)
		c.waiting = append(c.waiting, o)
		c.mu.Unlock()
		if !c.await(o) {
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

	var answered, requeue []*op
	if closed {
		answered = claim(batch)
		fail(answered, errClosed)
	} else {
		answered, requeue = c.commit(o, batch)
	}
	for _, b := range answered {
		if b != o {
			b.done <- struct{}{}
		}
	}

	c.mu.Lock()
	c.waiting = append(requeue, c.waiting...)
	c.handoff()
	c.mu.Unlock()
}

// await waits for o's answer or the lead, or withdraws o when its context
// ends first; it reports whether o's caller leads the next commit.
func (c *committer) await(o *op) bool {
	select {
	case <-o.done:
	case <-o.ctx.Done():
		if o.state.CompareAndSwap(pending, withdrawn) {
			o.err = &BusyError{Path: c.d.cfg.Path, Waited: time.Since(o.since), stop: o.ctx.Err()}
			return false
		}
		<-o.done // claimed or handed the lead: it follows at once
	}
	if o.state.Load() != leading {
		return false
	}
	o.state.Store(pending)
	return true
}

// handoff, with mu held, hands the lead to the first queued write whose
// caller still waits, or marks the committer idle.
func (c *committer) handoff() {
	for len(c.waiting) > 0 {
		if next := c.waiting[0]; next.state.CompareAndSwap(pending, leading) {
			next.done <- struct{}{}
			return
		}
		c.waiting = c.waiting[1:] // withdrawn
	}
	c.waiting = nil
	c.busy = false
	if c.closed {
		c.closeWriter()
	}
}

// claim takes the pending writes of batch for a commit or an answer.
func claim(batch []*op) []*op {
	out := batch[:0:0]
	for _, b := range batch {
		if b.state.CompareAndSwap(pending, claimed) {
			out = append(out, b)
		}
	}
	return out
}

var (
	errClosed = errors.New("sqlitestore: closed")
	// errGaveUp: the leader's own write gave up before the lock was taken.
	errGaveUp = errors.New("sqlitestore: leader gave up")
)

// commit waits for the write lock for batch, led by lead, then runs the
// writes still pending in one transaction on the write connection,
// opening it if needed. It returns the writes it answered, and those to
// queue again when lead gave up waiting. Writes that fail before COMMIT
// wrote nothing and get the error; a failed COMMIT may have landed, so
// its writes get storage.ErrOutcomeUnknown and the connection is
// reopened.
func (c *committer) commit(lead *op, batch []*op) (answered, requeue []*op) {
	if c.w == nil {
		// Opened on the leader's context: a reopen waits no longer than
		// the write that needs it.
		w, err := openWriter(lead.ctx, c.d)
		if err != nil && lead.ctx.Err() != nil && lead.state.CompareAndSwap(pending, withdrawn) {
			// The leader's write gave up, nothing sent; the others queue
			// again for the next leader.
			lead.err = &BusyError{Path: c.d.cfg.Path, Waited: time.Since(lead.since), stop: lead.ctx.Err()}
			return nil, slices.DeleteFunc(batch, func(o *op) bool { return o == lead })
		}
		if err != nil {
			answered = claim(batch)
			fail(answered, err)
			return answered, nil
		}
		c.w = w
	}
	batch, err := c.w.begin(lead, batch)
	if errors.Is(err, errGaveUp) {
		return nil, batch
	}
	batch = claim(batch)
	if err != nil {
		fail(batch, err)
		c.reopen()
		return batch, nil
	}
	answered = batch
	keys, err := c.w.apply(batch)
	if err == nil {
		if len(keys) > 0 {
			c.d.commits.Add(1)
			c.d.watches.own(c.w.first, c.w.last)
			c.d.watches.signal(keys, origins(keys, batch), false)
		}
		return answered, nil
	}
	c.reopen()
	fail(batch, err)
	return answered, nil
}

// origins is, beside keys (a commit's, as stage left them), the origin
// each one's write was made under (its op's context's), or nil when none
// was marked: a watch of the same origin leaves those keys out.
func origins(keys []string, batch []*op) []*origin.Origin {
	var out []*origin.Origin
	i := 0
	for _, o := range batch {
		if o.wrote == 0 {
			continue
		}
		if mark := origin.Of(o.ctx); mark != nil {
			if out == nil {
				out = make([]*origin.Origin, len(keys))
			}
			for j := range o.wrote {
				out[i+j] = mark
			}
		}
		i += o.wrote
	}
	return out
}

// reopen closes the write connection so the next commit starts from a
// fresh one, whatever went wrong.
func (c *committer) reopen() {
	c.w.close()
	c.w = nil
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
	upsert, remove, logChanges, prune, getSeq, setSeq *sql.Stmt
	create, swap, removeIf                            *sql.Stmt
	beginTx, commitTx, rollbackTx                     *sql.Stmt
	savepoint, rollbackTo, release                    *sql.Stmt
	// first and last: the sequence before and after the last commit
	// staged, so its versions are (first, last].
	first, last int64
}

func openWriter(ctx context.Context, d *sqlDriver) (*writer, error) {
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
		// Puts bind (value, version, key), then the version a swap expects.
		{&w.upsert, "INSERT INTO kv (key, value, version) VALUES (?3, ?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = excluded.version"},
		{&w.remove, "DELETE FROM kv WHERE key = ?"},
		{&w.create, "INSERT INTO kv (key, value, version) VALUES (?3, ?1, ?2) ON CONFLICT (key) DO NOTHING"},
		{&w.swap, "UPDATE kv SET value = ?, version = ? WHERE key = ? AND version = ?"},
		{&w.removeIf, "DELETE FROM kv WHERE key = ? AND version = ?"},
		// A commit's log rows from a JSON array of its keys, in order (see
		// logKeys): seq is the first version's predecessor plus 1 + index.
		{&w.logChanges, "INSERT INTO changes (seq, key, writer) SELECT ?1 + 1 + key, value, ?2 FROM json_each(?3)"},
		{&w.prune, "DELETE FROM changes WHERE seq <= ?"},
		{&w.getSeq, "SELECT value FROM meta WHERE name = 'seq'"},
		{&w.setSeq, "UPDATE meta SET value = ? WHERE name = 'seq'"},
		{&w.beginTx, "BEGIN IMMEDIATE"},
		{&w.commitTx, "COMMIT"},
		{&w.rollbackTx, "ROLLBACK"},
		{&w.savepoint, "SAVEPOINT multi"},
		{&w.rollbackTo, "ROLLBACK TO multi"},
		{&w.release, "RELEASE multi"},
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
	for _, st := range []*sql.Stmt{w.upsert, w.remove, w.logChanges, w.prune, w.getSeq, w.setSeq, w.create, w.swap, w.removeIf,
		w.beginTx, w.commitTx, w.rollbackTx, w.savepoint, w.rollbackTo, w.release} {
		if st != nil {
			_ = st.Close()
		}
	}
	_ = w.conn.Close()
	_ = w.db.Close()
	w.turn.close()
}

// The wait for the write lock polls (see turn): a flock(2) that blocks
// cannot be given up when a context ends, and a goroutine left blocked in
// one would take the lock after its caller left. Between tries it waits
// for another process's ring, or poll.
const poll = time.Millisecond

// begin takes the write lock in turn with other processes (see turn) and
// starts an IMMEDIATE transaction, retrying while a writer outside the
// turns holds SQLite's lock (a sqlite3 shell). Meanwhile it answers each
// write of batch whose BusyTimeout passes, and drops those withdrawn. It
// returns the writes left; if lead's own write gives up, errGaveUp,
// without the lock, and the writes left to queue again.
func (w *writer) begin(lead *op, batch []*op) (left []*op, err error) {
	locked := false
	for {
		if !locked {
			if locked, err = w.turn.try(); err != nil {
				break
			}
		}
		if locked {
			_, err = w.beginTx.ExecContext(context.Background())
			if err == nil {
				return batch, nil
			}
			if !isBusy(err) {
				break
			}
		}
		batch = w.expire(lead, batch, time.Now())
		if lead.state.Load() != pending {
			// Its context ended or its BusyTimeout passed.
			err = errGaveUp
			batch = slices.DeleteFunc(batch, func(o *op) bool { return o == lead })
			break
		}
		w.turn.wait(poll)
	}
	if locked {
		w.turn.release()
	} else {
		w.turn.abandon()
	}
	return batch, err
}

// expire answers the writes of batch whose BusyTimeout has passed at now,
// and lead's own if its context ended; it drops those and the writes
// their callers withdrew (each caller withdraws its own: see await).
func (w *writer) expire(lead *op, batch []*op, now time.Time) []*op {
	return slices.DeleteFunc(batch, func(o *op) bool {
		switch {
		case o.state.Load() == withdrawn:
			return true
		case o == lead && o.ctx.Err() != nil:
			o.state.Store(withdrawn)
			o.err = &BusyError{Path: w.d.cfg.Path, Waited: now.Sub(o.since), stop: o.ctx.Err()}
			return true
		case now.Sub(o.since) < w.d.cfg.BusyTimeout || !o.state.CompareAndSwap(pending, claimed):
			return false
		}
		o.ver, o.err = "", &BusyError{Path: w.d.cfg.Path, Waited: now.Sub(o.since)}
		if o != lead {
			o.done <- struct{}{}
		}
		return true
	})
}

// apply runs batch in the IMMEDIATE transaction begin opened, each write's condition
// checked against the state the writes before it left, and returns the
// keys written. A batch that writes nothing is rolled back: no sync.
func (w *writer) apply(batch []*op) ([]string, error) {
	// Not the callers' contexts: one caller giving up must not abort the
	// others' commit. The turn, taken before BEGIN, bounds the wait for
	// the lock (this connection's busy_timeout is 0).
	ctx := context.Background()
	defer w.turn.release()
	keys, err := w.stage(ctx, batch)
	if err != nil || len(keys) == 0 {
		if _, rerr := w.rollbackTx.ExecContext(ctx); rerr != nil && err == nil {
			err = rerr
		}
		return nil, err
	}
	if w.d.beforeCommit != nil {
		w.d.beforeCommit(w.conn)
	}
	if _, err := w.commitTx.ExecContext(ctx); err != nil {
		return nil, errors.Join(storage.ErrOutcomeUnknown, err)
	}
	return keys, nil
}

// stage writes batch inside the open transaction, each op's conditions
// checked against the state the ops before it left, and logs the keys it
// wrote in one statement. A Commit lands whole or not at all without
// undoing the other ops of the batch (see stageMulti).
func (w *writer) stage(ctx context.Context, batch []*op) ([]string, error) {
	var seq int64
	if err := w.getSeq.QueryRowContext(ctx).Scan(&seq); err != nil {
		return nil, err
	}
	first := seq
	var keys []string
	for _, o := range batch {
		o.ver, o.err, o.vers = "", nil, nil
		before := len(keys)
		var err error
		if o.multi != nil {
			keys, err = w.stageMulti(ctx, o, &seq, keys)
		} else {
			var wrote bool
			o.ver, wrote, err = w.writeIf(ctx, o.key, o.value, o.del, o.cond, &seq)
			switch {
			case errors.Is(err, errUnchanged):
				err = nil
			case err == nil && wrote:
				keys = append(keys, o.key)
			case err == nil:
				o.err = storage.ErrPreconditionFailed
			}
		}
		if err != nil {
			return nil, err
		}
		o.wrote = len(keys) - before
	}
	if seq == first {
		return nil, nil
	}
	if err := w.logKeys(ctx, first, keys); err != nil {
		return nil, err
	}
	if seq/pruneEvery != first/pruneEvery && seq > keepTail {
		if _, err := w.prune.ExecContext(ctx, seq-keepTail); err != nil {
			return nil, err
		}
	}
	_, err := w.setSeq.ExecContext(ctx, seq)
	if err == nil {
		w.first, w.last = first, seq
	}
	return keys, err
}

// logKeys writes the change log's rows of one commit: keys[i] at sequence
// first+1+i. One statement for the whole commit, not one a key: a row's
// insert through the driver cost about as much as the write it logs. The
// keys travel as JSON unchanged: the Store lets only valid UTF-8 without
// control characters through.
func (w *writer) logKeys(ctx context.Context, first int64, keys []string) error {
	list, err := json.Marshal(keys)
	if err == nil {
		_, err = w.logChanges.ExecContext(ctx, first, w.d.id, list)
	}
	return err
}

// writeIf writes key at the next version (a Put's version; a Delete's is
// "") in one statement whose WHERE (or ON CONFLICT) clause is cond: the
// rows it changed say whether cond held. wrote is false with no error when
// it did not (nothing written); an unconditional Delete of a missing key
// held but wrote nothing: errUnchanged. wrote says the sequence moved.
func (w *writer) writeIf(ctx context.Context, key string, value []byte, del bool, cond driver.Condition, seq *int64) (v driver.Version, wrote bool, err error) {
	var st *sql.Stmt
	args := make([]any, 0, 4)
	if !del {
		if value == nil {
			value = []byte{}
		}
		args = append(args, value, *seq+1)
	}
	args = append(args, key)
	switch cond.Kind() {
	case driver.CreateOnly:
		st = w.create
	case driver.MatchVersion:
		n, err := strconv.ParseInt(string(cond.Version()), 10, 64)
		if err != nil || formatVersion(n) != cond.Version() {
			return "", false, nil // not a version this store issued
		}
		st = w.swap
		if del {
			st = w.removeIf
		}
		args = append(args, n)
	default:
		st = w.upsert
		if del {
			st = w.remove
		}
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return "", false, err
	}
	n, err := res.RowsAffected()
	switch {
	case err != nil:
		return "", false, err
	case n == 0 && del && cond.Kind() == driver.Unconditional:
		return "", false, errUnchanged // deleting a missing key changes nothing
	case n == 0:
		return "", false, nil
	}
	*seq++
	if !del {
		v = formatVersion(*seq)
	}
	return v, true, nil
}

// errUnchanged: an unconditional Delete found no key; it held, and wrote
// nothing.
var errUnchanged = errors.New("sqlitestore: nothing to delete")

// stageMulti stages a Commit, each write in one conditioned statement
// (writeIf). When a write after the first could fail, they run under a
// savepoint, rolled back if one does: nothing of the Commit stays, and
// the batch's other ops are untouched. A Commit whose writes after the
// first are unconditional needs none (only the first can fail, before
// anything was written).
func (w *writer) stageMulti(ctx context.Context, o *op, seq *int64, keys []string) ([]string, error) {
	guarded := slices.ContainsFunc(o.multi[1:], func(wr driver.Write) bool { return wr.Cond.Kind() != driver.Unconditional })
	if guarded {
		if _, err := w.savepoint.ExecContext(ctx); err != nil {
			return keys, err
		}
	}
	start, kept := *seq, len(keys)
	vers := make([]driver.Version, len(o.multi))
	for i, wr := range o.multi {
		v, wrote, err := w.writeIf(ctx, wr.Key, wr.Value, wr.Delete, wr.Cond, seq)
		switch {
		case errors.Is(err, errUnchanged):
			continue
		case err != nil:
			return keys, err
		case !wrote:
			o.err = &driver.OpError{Op: "commit", Key: wr.Key, Kind: storage.ErrPreconditionFailed}
			*seq = start
			if guarded {
				if _, err := w.rollbackTo.ExecContext(ctx); err != nil {
					return keys, err
				}
				_, err = w.release.ExecContext(ctx)
				return keys[:kept], err
			}
			return keys[:kept], nil
		}
		vers[i] = v
		keys = append(keys, wr.Key)
	}
	o.vers = vers
	if guarded {
		_, err := w.release.ExecContext(ctx)
		return keys, err
	}
	return keys, nil
}
