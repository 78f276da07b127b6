package events

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// client is one open stream.
type client struct {
	ch      chan batch
	run     string
	tenant  string        // the request's (lifecycle.TenantOf): its tenant's events only
	timeout time.Duration // Config.WriteTimeout
	remote  string
	drop    chan struct{} // closed when the feed drops the client

	// Guarded by Feed.mu: while replaying, a full buffer is not a reason
	// to drop the client (it is not reading the buffer yet); overflow
	// tells it to catch up from the store instead.
	replaying, overflow bool

	// The write deadline is shared with abort, which cuts a write in
	// progress when the client is dropped.
	dmu     sync.Mutex
	aborted bool
	rc      *http.ResponseController
}

// abort ends a write in progress, if the ResponseWriter supports
// deadlines, and every later one.
func (c *client) abort() {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.aborted = true
	_ = c.rc.SetWriteDeadline(time.Unix(1, 0))
}

var errAborted = errors.New("events: client dropped")

// write sends p and flushes it, within c.timeout: a network deadline, so
// a peer that stops reading is cut off by it even when no event comes to
// overflow its buffer.
func (c *client) write(p []byte, w http.ResponseWriter) error {
	c.dmu.Lock()
	if c.aborted {
		c.dmu.Unlock()
		return errAborted
	}
	_ = c.rc.SetWriteDeadline(time.Now().Add(c.timeout)) // ErrNotSupported: no deadline, no harm
	c.dmu.Unlock()
	if _, err := w.Write(p); err != nil {
		return err
	}
	return c.rc.Flush()
}

// ServeHTTP streams the feed's events as text/event-stream (the contract
// of docs/http-api.md, "Events"). ?run= keeps one run's events (its run's
// and jobs' status changes). A Last-Event-ID header, or ?last_event_id=,
// first replays from the store every event after that id (no further back
// than Config.MaxReplay), page by page, then goes on live without a gap or
// a duplicate. An id the feed cannot resume from exactly (not an audit
// event id, no longer in the store, older than MaxReplay) first gets a
// stream.reset event saying why (see resumePoint).
func (f *Feed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, codes.MethodNotAllowed, "use GET")
		return
	}
	q := r.URL.Query()
	run := q.Get("run")
	if run != "" {
		if err := storekey.ValidateID("run id", run); err != nil {
			writeError(w, http.StatusBadRequest, codes.InvalidInput, err.Error())
			return
		}
	}
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = q.Get("last_event_id")
	}
	c := &client{ch: make(chan batch, f.cfg.Buffer), run: run, tenant: lifecycle.TenantOf(r.Context()), remote: r.RemoteAddr, timeout: f.cfg.WriteTimeout,
		drop: make(chan struct{}), rc: http.NewResponseController(w)}
	lastKey, lastAt, resume := layout.AuditKeyOfID(last)
	c.replaying = resume
	floor, err := f.subscribe(c)
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(f.cfg.Retry.Seconds()+0.5)))
		writeError(w, http.StatusServiceUnavailable, codes.ServiceUnavailable, err.Error())
		return
	}
	defer f.unsubscribe(c)
	if f.cfg.SendBuffer > 0 {
		setSendBuffer(r.Context(), f.cfg.SendBuffer)
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	ctx := r.Context()
	if c.write([]byte("retry: "+strconv.FormatInt(f.cfg.Retry.Milliseconds(), 10)+"\n\n"), w) != nil {
		return
	}
	var sent map[string]struct{}
	switch {
	case resume:
		if sent, err = f.resume(ctx, c, w, last, lastKey, lastAt, floor); err != nil {
			if ctx.Err() == nil && !errors.Is(err, errAborted) {
				f.log.WarnContext(ctx, "events: replay failed, the client will resume", "remote", c.remote, "err", err)
			}
			return
		}
	case last != "":
		if c.write(resetFrame(ResetInvalid), w) != nil {
			return
		}
	}
	f.live(ctx, c, w, sent)
}

// live writes the feed's events to c as they come, and a heartbeat when
// none came for a while, until the client leaves, is dropped or the feed
// stops. sent holds the ids the replay wrote, which the feed may send
// again once.
func (f *Feed) live(ctx context.Context, c *client, w http.ResponseWriter, sent map[string]struct{}) {
	hb := f.clock.NewTimer(f.cfg.Heartbeat)
	defer func() { hb.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.drop:
			return
		case <-f.stopped:
			return
		case <-hb.C():
			if c.write([]byte(": ping\n\n"), w) != nil {
				return
			}
			hb = f.clock.NewTimer(f.cfg.Heartbeat)
			pruneBelow(sent, idFloor(f.floor()))
		case b := <-c.ch:
			if _, dup := sent[b.id]; dup {
				delete(sent, b.id) // the feed sends each id once
				continue
			}
			if c.write(b.frame, w) != nil {
				return
			}
		}
	}
}

func pruneBelow(set map[string]struct{}, floor string) {
	for id := range set {
		if id < floor {
			delete(set, id)
		}
	}
}

// subscribe adds c to the broadcast and returns the poll floor: every
// event the feed sends c from now on has an id at or above it.
func (f *Feed) subscribe(c *client) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.stopped:
		return time.Time{}, errors.New("the event feed has stopped")
	default:
	}
	if f.cfg.MaxClients > 0 && len(f.clients) >= f.cfg.MaxClients {
		return time.Time{}, errors.New("too many event streams open")
	}
	f.clients[c] = struct{}{}
	cur := f.cursor
	if !f.running {
		cur = f.clock.Now() // Run will start its cursor no earlier
	}
	return cur.Add(-f.cfg.Lookback), nil
}

func (f *Feed) unsubscribe(c *client) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.clients, c)
}

// resumePoint says where a resume with the event id last starts, whose
// key and time are lastKey and lastAt: after that key when the event is
// in the store; otherwise the replay cannot know what the client missed
// and reason says why (ResetGone, ResetTooOld), and it starts at the next
// event that exists after the id (no earlier than MaxReplay ago). The
// returned from is the time of after's day.
func (f *Feed) resumePoint(ctx context.Context, lastKey string, lastAt time.Time) (after string, from time.Time, reason string, err error) {
	if min := f.clock.Now().Add(-f.cfg.MaxReplay); lastAt.Before(min) {
		return layout.AuditAfter(min), min, ResetTooOld, nil
	}
	_, _, err = f.cfg.Store.Get(ctx, lastKey)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return lastKey, lastAt, ResetGone, nil
	case err != nil:
		return "", time.Time{}, "", err
	}
	return lastKey, lastAt, "", nil
}

// resume writes to c every event after the event id last from the store
// (preceded by a stream.reset when it is not there to resume from), then
// hands c over to the live broadcast. Live events that the replay sent
// too are recognized by the returned set of ids (only ids from floor on
// can come live). If c's buffer overflowed meanwhile, the events it lost
// are all in the store from floor on, so they are read from there again.
func (f *Feed) resume(ctx context.Context, c *client, w http.ResponseWriter, last, lastKey string, lastAt, floor time.Time) (map[string]struct{}, error) {
	after, from, reason, err := f.resumePoint(ctx, lastKey, lastAt)
	if err != nil {
		return nil, err
	}
	if reason != "" {
		f.log.DebugContext(ctx, "events: resume from an id the feed cannot resume exactly", "remote", c.remote, "id", last, "reason", reason)
		if err := c.write(resetFrame(reason), w); err != nil {
			return nil, err
		}
	}
	r := &replay{f: f, c: c, w: w, tr: newTranslator(f.cfg.Store, f.box, f.agents),
		sent: map[string]struct{}{}, floorID: idFloor(floor), page: make([]string, 0, f.cfg.ReplayPage)}
	if err := r.emit(ctx, from, after); err != nil {
		return nil, err
	}
	for {
		f.mu.Lock()
		if !c.overflow {
			c.replaying = false
			f.mu.Unlock()
			return r.sent, nil
		}
		c.overflow = false
		f.mu.Unlock()
		for drained := false; !drained; {
			select {
			case <-c.ch:
			default:
				drained = true
			}
		}
		if err := r.emit(ctx, floor, max(after, layout.AuditAfter(floor))); err != nil {
			return nil, err
		}
	}
}

// replay is one client's read of the audit log from the store. It holds a
// page of keys (Config.ReplayPage) and the frames of one page at a time,
// never the backlog: memory per client is bounded whatever the resume's
// age.
type replay struct {
	f       *Feed
	c       *client
	w       http.ResponseWriter
	tr      *translator
	sent    map[string]struct{} // ids from floorID on: they may come live too
	floorID string
	page    []string
	ids     []string // the page's ids, "" for a key not to read
	raws    [][]byte // the page's objects, while they are translated
	frames  []byte
}

// emit writes every event after the key after, from the day of from on,
// a page at a time.
func (r *replay) emit(ctx context.Context, from time.Time, after string) error {
	for _, prefix := range days(from, r.f.clock.Now().Add(r.f.cfg.Lookback)) {
		for key, err := range r.f.cfg.Store.ListAfter(ctx, prefix, after) {
			if err != nil {
				return err
			}
			if r.page = append(r.page, key); len(r.page) == cap(r.page) {
				if err := r.flush(ctx); err != nil {
					return err
				}
			}
		}
	}
	return r.flush(ctx)
}

// flush reads and translates the page's events, in its turn among the
// replays (Config.MaxReplays) and at the shared rate (Config.ReplayRate),
// then writes their frames to the client in one write, outside its turn.
func (r *replay) flush(ctx context.Context) error {
	if len(r.page) == 0 {
		return nil
	}
	defer func() { r.page = r.page[:0] }()
	if err := r.f.rate.wait(ctx, len(r.page)); err != nil {
		return err
	}
	select {
	case r.f.pages <- struct{}{}:
	default:
		if r.f.replayWaits != nil {
			r.f.replayWaits()
		}
		select {
		case r.f.pages <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := r.read(ctx)
	<-r.f.pages
	// What the page read is let go once written: a replay waiting for its
	// turn holds its next page's keys only, so hundreds of resuming
	// clients hold a few pages' worth between them, not one each.
	frames := r.frames
	r.frames, r.ids, r.raws = nil, nil, nil
	if err != nil || len(frames) == 0 {
		return err
	}
	return r.c.write(frames, r.w)
}

// pageReads is how many audit objects of a page a replay reads at once:
// on S3 a read is a round trip, and a page read one after the other would
// take a round trip per event.
const pageReads = 8

// read appends the frames of the page's events to r.frames: it reads the
// objects pageReads at a time, then translates them in order (the
// translator is not safe for concurrent use).
func (r *replay) read(ctx context.Context) error {
	r.ids = make([]string, 0, len(r.page))
	for _, key := range r.page {
		id, ok := layout.ParseAuditKey(key)
		if _, sent := r.sent[id]; !ok || sent {
			id = "" // not an event, or sent already: not read
		}
		r.ids = append(r.ids, id)
	}
	r.raws = make([][]byte, len(r.page))
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(pageReads, len(r.page)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(r.page) && failed.Load() == nil; i = int(next.Add(1) - 1) {
				if r.ids[i] == "" {
					continue
				}
				raw, err := getEvent(ctx, r.f.cfg.Store, r.page[i])
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				r.raws[i] = raw
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	r.tr.begin()
	for i, id := range r.ids {
		if id == "" {
			continue
		}
		b, err := translateEvent(ctx, r.tr, id, r.raws[i])
		r.raws[i] = nil
		if err != nil && !errors.Is(err, errSkip) {
			return err
		}
		if id >= r.floorID {
			r.sent[id] = struct{}{}
		}
		if len(b.frame) == 0 || (r.c.run != "" && r.c.run != b.run) || !b.seenBy(r.c.tenant) {
			continue
		}
		r.frames = append(r.frames, b.frame...)
	}
	return nil
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, msg})
}

type connKey struct{}

// ConnContext is an http.Server's ConnContext that lets the feed reach the
// connection of each stream it serves, to bound its send buffer
// (Config.SendBuffer). A server without it serves the feed as well, with
// the kernel's buffers.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// setSendBuffer sets the send buffer of the request's connection, through
// wrappers that expose theirs with NetConn (as tls.Conn does).
func setSendBuffer(ctx context.Context, n int) {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	for range 8 {
		switch v := c.(type) {
		case interface{ SetWriteBuffer(int) error }:
			_ = v.SetWriteBuffer(n) // best effort: the deadline still holds
			return
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return
		}
	}
}
