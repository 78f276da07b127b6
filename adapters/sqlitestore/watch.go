package sqlitestore

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/origin"
)

// watch is one open Watch.
type watch struct {
	prefix string
	// except: the origin its context was marked with; this Store's
	// writes of that origin do not signal it (internal/origin).
	except *origin.Origin
	ch     chan struct{} // capacity 1: signals coalesce
	stop   func() bool   // unregisters the close at the context's end
}

// watchSet holds the open watches and the poller that notices other
// processes' commits while any is open.
type watchSet struct {
	d       *sqlDriver
	mu      sync.Mutex
	watches map[*watch]struct{}
	p       *poller // nil while no watch is open
	closed  bool    // by Close: no more watches
}

// poller is one run of the doorbell, from the first open watch to the
// last one's end (or Close): its connection, and how far it has read.
type poller struct {
	ws      *watchSet
	conn    *sql.Conn
	stmts   [3]*sql.Stmt // prepared on conn at first use (stmt)
	version int64        // data_version when last read
	cursor  int64        // last change-log seq read
	// tip: every version in (cursor, tip] is this Store's own, signalled
	// at its commit, so the poller need not read them (under ws.mu).
	tip     int64
	stopc   chan struct{}
	stopped chan struct{}
}

// Watch implements driver.Watcher.
func (d *sqlDriver) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	ws := &d.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return nil, opErr(ctx, "watch", prefix, errClosed)
	}
	if ws.p == nil {
		// Start the poller here, not in its goroutine: the cursor read
		// now is what makes other processes' writes after Watch returns
		// unmissable.
		p, err := ws.start(ctx)
		if err != nil {
			return nil, opErr(ctx, "watch", prefix, err)
		}
		ws.p = p
	}
	w := &watch{prefix: prefix, except: origin.Of(ctx), ch: make(chan struct{}, 1)}
	if ws.watches == nil {
		ws.watches = make(map[*watch]struct{})
	}
	ws.watches[w] = struct{}{}
	w.stop = context.AfterFunc(ctx, func() { ws.end(w) })
	return w.ch, nil
}

// end closes w at its context's end, and stops the poller when w was the
// last open watch: an idle Store polls nothing.
func (ws *watchSet) end(w *watch) {
	ws.mu.Lock()
	if _, ok := ws.watches[w]; !ok {
		ws.mu.Unlock() // closed by Close already
		return
	}
	delete(ws.watches, w)
	close(w.ch)
	var p *poller
	if len(ws.watches) == 0 {
		p, ws.p = ws.p, nil
	}
	ws.mu.Unlock()
	if p != nil {
		p.stop()
	}
}

func (ws *watchSet) start(ctx context.Context) (*poller, error) {
	conn, err := ws.d.read.Conn(ctx)
	if err != nil {
		return nil, err
	}
	p := &poller{ws: ws, conn: conn, stopc: make(chan struct{}), stopped: make(chan struct{})}
	err = conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&p.version)
	if err == nil {
		err = conn.QueryRowContext(ctx, "SELECT value FROM meta WHERE name = 'seq'").Scan(&p.cursor)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	p.tip = p.cursor
	go p.poll()
	return p, nil
}

// signal wakes the watchers of keys (of every key, with all); it never
// blocks. origins, when not nil, is the origin each key's write was made
// under: a watch of that origin is not woken by it (its writer knows).
func (ws *watchSet) signal(keys []string, origins []*origin.Origin, all bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.watches {
		for i, k := range keys {
			if !all && origins != nil && w.except != nil && origins[i] == w.except {
				continue
			}
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
// they follow the running poller's tip, it will not read them back.
func (ws *watchSet) own(first, last int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.p != nil && first == ws.p.tip {
		ws.p.tip = last
	}
}

// poll rings the doorbell every WatchInterval: data_version changes when
// another connection commits, and only then is the change log read.
func (p *poller) poll() {
	defer close(p.stopped)
	t := time.NewTicker(p.ws.d.cfg.WatchInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stopc:
			return
		case <-t.C:
			p.check()
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
func (p *poller) stmt(ctx context.Context, i int) (*sql.Stmt, error) {
	if p.stmts[i] == nil {
		st, err := p.conn.PrepareContext(ctx, pollQueries[i])
		if err != nil {
			return nil, err
		}
		p.stmts[i] = st
	}
	return p.stmts[i], nil
}

// queryRow scans the one row of the poller's statement i into dest.
func (p *poller) queryRow(ctx context.Context, i int, dest ...any) error {
	st, err := p.stmt(ctx, i)
	if err != nil {
		return err
	}
	return st.QueryRowContext(ctx).Scan(dest...)
}

// check reads what other processes committed since the last check and
// signals their keys. An error is retried at the next tick.
func (p *poller) check() {
	ctx := context.Background()
	ws := p.ws
	var v int64
	if err := p.queryRow(ctx, dataVersion, &v); err != nil || v == p.version {
		return
	}
	// data_version counts this Store's own commits too (another
	// connection's): when the sequence has not passed the tip of its own,
	// there is nothing to read.
	var seq int64
	if err := p.queryRow(ctx, lastSeq, &seq); err != nil {
		return
	}
	ws.mu.Lock()
	mine := seq <= p.tip
	ws.mu.Unlock()
	if mine {
		p.version, p.cursor = v, max(p.cursor, seq)
		return
	}
	st, err := p.stmt(ctx, readLog)
	if err != nil {
		return
	}
	rows, err := st.QueryContext(ctx, p.cursor)
	if err != nil {
		return
	}
	var keys []string
	cursor, gap := p.cursor, false
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
	p.version, p.cursor = v, cursor
	ws.mu.Lock()
	p.tip = max(p.tip, cursor)
	ws.mu.Unlock()
	if gap {
		keys = []string{""}
	}
	if len(keys) > 0 {
		ws.signal(keys, nil, gap)
	}
}

// stop ends the poller and releases its statements and connection,
// waiting for it: it is called without the set's lock, which a check in
// progress takes.
func (p *poller) stop() {
	close(p.stopc)
	<-p.stopped
	for _, st := range p.stmts {
		if st != nil {
			_ = st.Close()
		}
	}
	_ = p.conn.Close()
}

// stop, at Close, closes every open watch's channel (its watcher's wait
// ends, as at its context's end) and stops the poller.
func (ws *watchSet) stop() {
	ws.mu.Lock()
	ws.closed = true
	p := ws.p
	ws.p = nil
	for w := range ws.watches {
		w.stop()
		close(w.ch)
	}
	ws.watches = nil
	ws.mu.Unlock()
	if p != nil {
		p.stop()
	}
}
