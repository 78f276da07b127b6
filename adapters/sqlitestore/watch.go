package sqlitestore

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"time"
)

// watch is one open Watch.
type watch struct {
	prefix string
	ch     chan struct{} // capacity 1: signals coalesce
}

// watchSet holds the open watches and the poller that notices other
// processes' commits.
type watchSet struct {
	d       *sqlDriver
	mu      sync.Mutex
	watches map[*watch]struct{}
	// The poller, started by the first Watch: its connection, and how
	// far it has read the change log.
	conn    *sql.Conn
	stmts   [3]*sql.Stmt // prepared on conn at first use (pollStmt)
	version int64        // data_version when last read
	cursor  int64        // last change-log seq read
	// tip: every version in (cursor, tip] is this Store's own, signalled
	// at its commit, so the poller need not read them (under mu).
	tip     int64
	stopc   chan struct{}
	stopped chan struct{}
	closed  bool // by Close: no more watches
}

// Watch implements driver.Watcher.
func (d *sqlDriver) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	ws := &d.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return nil, opErr(ctx, "watch", prefix, errClosed)
	}
	if ws.stopc == nil {
		// Start the poller here, not in its goroutine: the cursor read
		// now is what makes other processes' writes after Watch returns
		// unmissable.
		if err := ws.start(ctx); err != nil {
			return nil, opErr(ctx, "watch", prefix, err)
		}
	}
	w := &watch{prefix: prefix, ch: make(chan struct{}, 1)}
	if ws.watches == nil {
		ws.watches = make(map[*watch]struct{})
	}
	ws.watches[w] = struct{}{}
	context.AfterFunc(ctx, func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		delete(ws.watches, w)
		close(w.ch)
	})
	return w.ch, nil
}

func (ws *watchSet) start(ctx context.Context) error {
	conn, err := ws.d.read.Conn(ctx)
	if err != nil {
		return err
	}
	err = conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&ws.version)
	if err == nil {
		err = conn.QueryRowContext(ctx, "SELECT value FROM meta WHERE name = 'seq'").Scan(&ws.cursor)
	}
	if err != nil {
		_ = conn.Close()
		return err
	}
	ws.conn = conn
	ws.tip = ws.cursor
	ws.stopc, ws.stopped = make(chan struct{}), make(chan struct{})
	go ws.poll()
	return nil
}

// signal wakes the watchers of keys (of every key, with all); it never
// blocks.
func (ws *watchSet) signal(keys []string, all bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.watches {
		for _, k := range keys {
			if all || strings.HasPrefix(k, w.prefix) {
				select {
				case w.ch <- struct{}{}:
				default:
				}
				break
			}
		}
	}
}

// own records that this Store committed the versions (first, last]: if
// they follow the tip, the poller will not read them back.
func (ws *watchSet) own(first, last int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if first == ws.tip {
		ws.tip = last
	}
}

// poll rings the doorbell every WatchInterval: data_version changes when
// another connection commits, and only then is the change log read.
func (ws *watchSet) poll() {
	defer close(ws.stopped)
	t := time.NewTicker(ws.d.cfg.WatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ws.stopc:
			return
		case <-t.C:
			ws.check()
		}
	}
}

// The poller's statements, prepared once on its connection: a tick that
// prepared them again cost more than the query.
const (
	dataVersion = iota
	lastSeq
	readLog
)

var pollQueries = [...]string{
	dataVersion: "PRAGMA data_version",
	lastSeq:     "SELECT value FROM meta WHERE name = 'seq'",
	readLog:     "SELECT seq, key, writer FROM changes WHERE seq > ? ORDER BY seq",
}

// stmt returns the poller's statement i, preparing it at first use (a
// failure is tried again at the next tick).
func (ws *watchSet) stmt(ctx context.Context, i int) (*sql.Stmt, error) {
	if ws.stmts[i] == nil {
		st, err := ws.conn.PrepareContext(ctx, pollQueries[i])
		if err != nil {
			return nil, err
		}
		ws.stmts[i] = st
	}
	return ws.stmts[i], nil
}

// queryRow scans the one row of the poller's statement i into dest.
func (ws *watchSet) queryRow(ctx context.Context, i int, dest ...any) error {
	st, err := ws.stmt(ctx, i)
	if err != nil {
		return err
	}
	return st.QueryRowContext(ctx).Scan(dest...)
}

// check reads what other processes committed since the last check and
// signals their keys. An error is retried at the next tick.
func (ws *watchSet) check() {
	ctx := context.Background()
	var v int64
	if err := ws.queryRow(ctx, dataVersion, &v); err != nil || v == ws.version {
		return
	}
	// data_version counts this Store's own commits too (another
	// connection's): when the sequence has not passed the tip of its own,
	// there is nothing to read.
	var seq int64
	if err := ws.queryRow(ctx, lastSeq, &seq); err != nil {
		return
	}
	ws.mu.Lock()
	mine := seq <= ws.tip
	ws.mu.Unlock()
	if mine {
		ws.version, ws.cursor = v, max(ws.cursor, seq)
		return
	}
	st, err := ws.stmt(ctx, readLog)
	if err != nil {
		return
	}
	rows, err := st.QueryContext(ctx, ws.cursor)
	if err != nil {
		return
	}
	var keys []string
	cursor, gap := ws.cursor, false
	for rows.Next() {
		var seq, writer int64
		var key string
		if err := rows.Scan(&seq, &key, &writer); err != nil {
			_ = rows.Close()
			return
		}
		// Every version has its entry; a hole means the log was pruned
		// past what was read, so anything may have changed.
		gap = gap || seq != cursor+1
		cursor = seq
		if writer != ws.d.id { // this handle's commits signalled already
			keys = append(keys, key)
		}
	}
	if rows.Close() != nil || rows.Err() != nil {
		return
	}
	ws.version, ws.cursor = v, cursor
	ws.mu.Lock()
	ws.tip = max(ws.tip, cursor)
	ws.mu.Unlock()
	if gap {
		keys = []string{""}
	}
	if len(keys) > 0 {
		ws.signal(keys, gap)
	}
}

// stop ends the poller and releases its connection.
func (ws *watchSet) stop() {
	ws.mu.Lock()
	stopc, was := ws.stopc, ws.closed
	ws.closed = true
	ws.mu.Unlock()
	if stopc == nil || was {
		return
	}
	close(stopc)
	<-ws.stopped
	for i, st := range ws.stmts {
		if st != nil {
			_ = st.Close()
			ws.stmts[i] = nil
		}
	}
	_ = ws.conn.Close()
}
