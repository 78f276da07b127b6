package events

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/storage"
)

// writeTimeout bounds one write to a client, in wall-clock time (it is a
// network deadline): a peer that stops reading is cut off by it even
// when no event comes to overflow its buffer.
const writeTimeout = 30 * time.Second

// client is one open stream.
type client struct {
	ch     chan batch
	run    string
	remote string
	drop   chan struct{} // closed when the feed drops the client

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

// write sends p and flushes it, within writeTimeout.
func (c *client) write(p []byte, w http.ResponseWriter) error {
	c.dmu.Lock()
	if c.aborted {
		c.dmu.Unlock()
		return errAborted
	}
	_ = c.rc.SetWriteDeadline(time.Now().Add(writeTimeout)) // ErrNotSupported: no deadline, no harm
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
// than Config.MaxReplay), then goes on live without a gap or a duplicate;
// an id that is not an audit event id is ignored (the stream starts live).
func (f *Feed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, codes.MethodNotAllowed, "use GET")
		return
	}
	q := r.URL.Query()
	run := q.Get("run")
	if run != "" {
		if err := storage.ValidateID("run id", run); err != nil {
			writeError(w, http.StatusBadRequest, codes.InvalidInput, err.Error())
			return
		}
	}
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = q.Get("last_event_id")
	}
	c := &client{ch: make(chan batch, f.cfg.Buffer), run: run, remote: r.RemoteAddr,
		drop: make(chan struct{}), rc: http.NewResponseController(w)}
	lastAt, resume := idTime(last)
	c.replaying = resume
	floor, err := f.subscribe(c)
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(f.cfg.Retry.Seconds()+0.5)))
		writeError(w, http.StatusServiceUnavailable, codes.ServiceUnavailable, err.Error())
		return
	}
	defer f.unsubscribe(c)

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
	if resume {
		if sent, err = f.replay(ctx, c, w, last, lastAt, floor); err != nil {
			if ctx.Err() == nil && !errors.Is(err, errAborted) {
				f.log.WarnContext(ctx, "events: replay failed, the client will resume", "remote", c.remote, "err", err)
			}
			return
		}
	}
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

// replay writes to c every event after lastID from the store, then hands
// c over to the live broadcast. Live events that the replay sent too are
// recognized by the returned set of ids (only ids from floor on can come
// live). If c's buffer overflowed meanwhile, the events it lost are all
// in the store from floor on, so they are read from there again.
func (f *Feed) replay(ctx context.Context, c *client, w http.ResponseWriter, lastID string, lastAt, floor time.Time) (map[string]struct{}, error) {
	tr := newTranslator(f.cfg.Store, f.box)
	tr.begin()
	sent := map[string]struct{}{}
	floorID := idFloor(floor)
	emit := func(from time.Time) error {
		fromID := idFloor(from)
		for _, prefix := range days(from, f.clock.Now().Add(f.cfg.Lookback)) {
			for key, err := range f.cfg.Store.List(ctx, prefix) {
				if err != nil {
					return err
				}
				id, ok := layout.ParseAuditKey(key)
				if !ok {
					continue
				}
				if id <= lastID || id < fromID {
					continue
				}
				if _, ok := sent[id]; ok {
					continue
				}
				b, err := readEvent(ctx, f.cfg.Store, tr, key, id)
				if err != nil && !errors.Is(err, errSkip) {
					return err
				}
				if id >= floorID {
					sent[id] = struct{}{}
				}
				if len(b.frame) == 0 || (c.run != "" && c.run != b.run) {
					continue
				}
				if err := c.write(b.frame, w); err != nil {
					return err
				}
			}
		}
		return nil
	}
	from := lastAt
	if min := f.clock.Now().Add(-f.cfg.MaxReplay); from.Before(min) {
		from = min
	}
	if err := emit(from); err != nil {
		return nil, err
	}
	for {
		f.mu.Lock()
		if !c.overflow {
			c.replaying = false
			f.mu.Unlock()
			return sent, nil
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
		if err := emit(floor); err != nil {
			return nil, err
		}
	}
}

// idTime reads the time an audit id starts with.
func idTime(id string) (time.Time, bool) {
	const layout = "20060102T150405.000000000Z"
	if len(id) < len(layout) {
		return time.Time{}, false
	}
	t, err := time.Parse(layout, id[:len(layout)])
	return t, err == nil
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, msg})
}
