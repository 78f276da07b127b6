package events

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/pacing"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Defaults of Config.
const (
	DefaultPollInterval      = 250 * time.Millisecond
	DefaultWatchPollInterval = time.Minute
	DefaultIdlePollInterval  = 5 * time.Second
	DefaultHeartbeat         = 15 * time.Second
	DefaultBuffer            = 256
	DefaultLookback          = 10 * time.Second
	DefaultMaxReplay         = 7 * 24 * time.Hour
	DefaultMaxClients        = 1024
	DefaultRetry             = 3 * time.Second
	DefaultReplayPage        = 256
	DefaultMaxReplays        = 4
	DefaultReplayRate        = 5000
	DefaultWriteTimeout      = 30 * time.Second
	DefaultSendBuffer        = 32 << 10
)

// Config configures a Feed. Only Store is required; every other field has
// the documented default when left zero.
type Config struct {
	// Store is the store whose audit log the feed tails. Required. When it
	// watches (storage.Store.Watch) the feed lists the log when the watch signals a
	// change (at most once per PollInterval) and every WatchPollInterval;
	// otherwise every PollInterval.
	Store *storage.Store
	// Clock times polls, heartbeats and the replay rate. Default: the wall
	// clock.
	Clock clock.Clock
	// Logger receives store outages (WARN, once per outage), skipped audit
	// events and dropped clients (WARN). Default: slog.Default().
	Logger *slog.Logger
	// PollInterval is how often the audit log is listed when the store
	// cannot watch it, and the least time between two listings when it
	// can. Default 250 ms.
	PollInterval time.Duration
	// WatchPollInterval is how often the audit log is listed, with a store
	// that watches it, when no change is signalled: the fallback for
	// writers the watch does not see (another host on a shared folder).
	// Default 1 min: the watch misses nothing on one host, and on filestore
	// each listing reads every name of the day's folder.
	WatchPollInterval time.Duration
	// IdlePollInterval is the longest gap between two listings of a store
	// that cannot watch (S3), reached by doubling from PollInterval while
	// the listings find nothing new, and left at the first listing that
	// does: an idle feed costs a LIST request every IdlePollInterval, not
	// four a second, and the first event after a quiet spell reaches the
	// streams within it. Default 5 s.
	IdlePollInterval time.Duration
	// Heartbeat is how often an idle stream gets a ": ping" comment, so
	// proxies keep it open. Default 15 s.
	Heartbeat time.Duration
	// Buffer is how many audit events' worth of frames wait for one client;
	// a client that falls further behind is disconnected. Default 256: the
	// frames are shared by every client, so a slot costs a reference, and
	// a client's connection buffers little of a burst (SendBuffer), so the
	// feed keeps the burst instead.
	Buffer int
	// Lookback is how far behind the feed's cursor an audit event may be
	// listed and still be delivered: the clock skew between writing nodes
	// plus the time a writer may take between stamping an event and storing
	// it (the job queue re-emits events a dead writer missed under their
	// original time). An event later than that is not sent live (a replay
	// from the store still has it). Default 10 s.
	Lookback time.Duration
	// MaxReplay bounds how far back a resume (Last-Event-ID) replays: a
	// client whose last event is older is told so (a stream.reset event)
	// and gets the events of the last MaxReplay only. Default 7 days.
	MaxReplay time.Duration
	// MaxClients bounds the open streams; past it a new one gets 503 with
	// Retry-After. Default 1024; negative means no limit.
	MaxClients int
	// Retry is the reconnection delay sent to clients (the retry: field).
	// Default 3 s.
	Retry time.Duration
	// ReplayPage is how many audit events a resume reads from the store at
	// a time, and so (with Buffer) what one resuming client holds in
	// memory. Default 256.
	ReplayPage int
	// MaxReplays bounds the pages that resumes read from the store at
	// once, across all clients; a resume waits for its turn before each
	// page, never while it writes to its client. Default 4.
	MaxReplays int
	// ReplayRate bounds the audit events per second that all resumes
	// together read from the store (a burst of one second's worth is
	// free). Default 5000; negative means no limit.
	ReplayRate int
	// WriteTimeout bounds each write to a client (an event, a replay's
	// page, a heartbeat), in wall-clock time: a client whose connection
	// does not take a write within it is disconnected. Default 30 s.
	WriteTimeout time.Duration
	// SendBuffer is the kernel's send buffer (SO_SNDBUF) of each stream's
	// connection, set when the feed can reach the connection (served by an
	// http.Server whose ConnContext is ConnContext, as
	// httpapi.Limits.HTTPServer's is). A write waits, and WriteTimeout
	// runs, only once the client leaves unread what this buffer and its
	// own receive buffer hold; left to itself Linux grows the send buffer
	// to 4 MiB (tcp_wmem), so a client that stops reading would hold that
	// much of the server's memory and be noticed only after it. Default
	// 32 KiB (the kernel doubles it); negative: the kernel's.
	SendBuffer int
}

// Feed is the Worker's event stream: Run tails the store's audit log and
// ServeHTTP streams what it finds to each client. Create it with New.
type Feed struct {
	cfg   Config
	clock clock.Clock
	log   *slog.Logger
	box   *inbox.Box

	mu      sync.Mutex
	clients map[*client]struct{}
	// cursor is the start of the last successful poll: every event stamped
	// before cursor - Lookback is taken to have been listed by then.
	cursor  time.Time
	running bool
	stopped chan struct{} // closed when Run returns
	dropped int64

	// seen holds the ids delivered that are not yet behind the poll floor,
	// so an event listed again in the lookback window is sent once. Only
	// the Run goroutine touches it.
	seen map[string]struct{}
	tr   *translator
	// agents is the run-to-agent cache every translator shares.
	agents *agentCache
	// progress is, while polls fail, the last key handled that the next
	// poll's window no longer needs in seen: the next poll lists after it,
	// so an event is not sent twice after a poll failed half-way.
	progress string
	// outage is set while polls fail, so an outage is logged once.
	outage bool
	// pages holds a token per replay page being read (MaxReplays); rate
	// paces the events those pages read (ReplayRate).
	pages chan struct{}
	rate  *limiter
	// polled, when set (by tests, before Run), is called after each poll,
	// once the next poll's timer is scheduled.
	polled func()
	// replayWaits, when set (by tests, before Run), is called when a
	// replay waits for its turn to read a page (Config.MaxReplays).
	replayWaits func()
}

// New checks cfg, fills in the defaults and returns a Feed.
func New(cfg Config) (*Feed, error) {
	if cfg.Store == nil {
		return nil, errors.New("events: Config.Store is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.PollInterval, DefaultPollInterval)
	def(&cfg.WatchPollInterval, DefaultWatchPollInterval)
	def(&cfg.IdlePollInterval, DefaultIdlePollInterval)
	def(&cfg.Heartbeat, DefaultHeartbeat)
	def(&cfg.Lookback, DefaultLookback)
	def(&cfg.MaxReplay, DefaultMaxReplay)
	def(&cfg.Retry, DefaultRetry)
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.MaxClients == 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if cfg.ReplayPage <= 0 {
		cfg.ReplayPage = DefaultReplayPage
	}
	if cfg.MaxReplays <= 0 {
		cfg.MaxReplays = DefaultMaxReplays
	}
	if cfg.ReplayRate == 0 {
		cfg.ReplayRate = DefaultReplayRate
	}
	def(&cfg.WriteTimeout, DefaultWriteTimeout)
	if cfg.SendBuffer == 0 {
		cfg.SendBuffer = DefaultSendBuffer
	}
	box, err := inbox.New(inbox.Config{Store: cfg.Store, Clock: cfg.Clock, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	agents := newAgentCache()
	return &Feed{
		cfg: cfg, clock: cfg.Clock, log: cfg.Logger, box: box,
		clients: map[*client]struct{}{},
		stopped: make(chan struct{}),
		seen:    map[string]struct{}{},
		agents:  agents,
		tr:      newTranslator(cfg.Store, box, agents),
		pages:   make(chan struct{}, cfg.MaxReplays),
		rate:    newLimiter(cfg.Clock, cfg.ReplayRate),
	}, nil
}

// Dropped reports how many clients were disconnected for falling behind.
func (f *Feed) Dropped() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dropped
}

// Clients reports how many streams are open.
func (f *Feed) Clients() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.clients)
}

// Run tails the audit log until ctx ends, then ends every open stream and
// returns nil. A store failure never stops it: the poll is retried at the
// next interval. Run may be called once.
func (f *Feed) Run(ctx context.Context) error {
	f.mu.Lock()
	if f.running {
		f.mu.Unlock()
		return errors.New("events: Feed.Run called twice")
	}
	f.running = true
	f.cursor = f.clock.Now()
	f.mu.Unlock()
	defer close(f.stopped)
	wake := f.watch(ctx)
	idle := pacing.Poll{Idle: max(f.cfg.IdlePollInterval, f.cfg.PollInterval)}
	for {
		found := f.poll(ctx)
		// PollInterval between two listings, watched or not: a busy log
		// signals at every write, and each listing reads the Lookback
		// window again. Unwatched, the gap grows while nothing is found.
		wait := f.cfg.PollInterval
		if wake == nil {
			wait = max(wait, idle.Next(found))
		}
		gap := f.clock.NewTimer(wait)
		if f.polled != nil {
			f.polled()
		}
		select {
		case <-ctx.Done():
			gap.Stop()
			return nil
		case <-gap.C():
		}
		if wake == nil {
			continue
		}
		fallback := f.clock.NewTimer(max(f.cfg.WatchPollInterval-f.cfg.PollInterval, 0))
		select {
		case <-ctx.Done():
			fallback.Stop()
			return nil
		case <-fallback.C():
		case _, ok := <-wake:
			fallback.Stop()
			if !ok && ctx.Err() == nil {
				wake = nil // the adapter gave the watch up: poll
				f.log.WarnContext(ctx, "events: the store stopped watching the audit log, polling it every PollInterval")
			}
		}
	}
}

// watch returns the channel of a watch on the audit log, or nil when the
// store cannot watch it (the feed then polls).
func (f *Feed) watch(ctx context.Context) <-chan struct{} {
	ch, err := f.cfg.Store.Watch(ctx, layout.AuditPrefix)
	if err != nil {
		f.log.DebugContext(ctx, "events: no watch on the audit log, polling it", "err", err)
		return nil
	}
	return ch
}

// floor is the lowest audit id a poll takes: the cursor less Lookback, as
// an id prefix (ids start with their time, so they compare as strings).
func (f *Feed) floor() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cursor.Add(-f.cfg.Lookback)
}

// idFloor renders t as the lowest id stamped at or after t.
func idFloor(t time.Time) string { return layout.AuditIDStamp(t) }

// days returns the day prefixes holding events stamped from..to.
func days(from, to time.Time) []string {
	var out []string
	for d := from.UTC().Truncate(24 * time.Hour); !d.After(to); d = d.Add(24 * time.Hour) {
		out = append(out, layout.AuditDayPrefix(d))
	}
	return out
}

// poll lists the audit log from the floor on (ListAfter: what sorts before
// the floor costs nothing), sends the events not seen yet in id order, and
// moves the cursor once all were handled. An idle poll lists one page per
// day in its window (one, or two around midnight) holding the events of
// the last Lookback, whatever the size of the day.
func (f *Feed) poll(ctx context.Context) (found bool) {
	start := f.clock.Now()
	from := f.floor()
	if min := start.Add(-f.cfg.MaxReplay); from.Before(min) {
		from = min // after an outage of days: no more than a replay's worth
	}
	// Ids from keep on may be listed again by the next poll, so seen must
	// hold them; older ones need not be kept.
	keep := idFloor(start.Add(-f.cfg.Lookback))
	// One cursor serves every day: it sorts before every key of the days
	// after from's, so those are listed whole.
	after := max(layout.AuditAfter(from), f.progress)
	f.tr.begin()
	// Up to Lookback ahead too: a node whose clock runs ahead writes into
	// tomorrow's prefix before midnight here.
	for _, prefix := range days(from, start.Add(f.cfg.Lookback)) {
		for key, err := range f.cfg.Store.ListAfter(ctx, prefix, after) {
			if err != nil {
				f.failed(ctx, err)
				return found
			}
			id, ok := layout.ParseAuditKey(key)
			if !ok {
				continue
			}
			if _, ok := f.seen[id]; ok {
				continue
			}
			b, err := readEvent(ctx, f.cfg.Store, f.tr, key, id)
			if errors.Is(err, errSkip) {
				f.log.WarnContext(ctx, "events: audit event skipped", "key", key, "err", err)
			} else if err != nil {
				f.failed(ctx, err)
				return found
			}
			found = true
			if id >= keep {
				f.seen[id] = struct{}{}
			} else {
				f.progress = max(f.progress, key)
			}
			if len(b.frame) > 0 {
				f.broadcast(ctx, b)
			}
		}
	}
	if f.outage {
		f.outage = false
		f.log.InfoContext(ctx, "events: audit log readable again")
	}
	f.progress = ""
	f.mu.Lock()
	if start.After(f.cursor) {
		f.cursor = start
	}
	floor := idFloor(f.cursor.Add(-f.cfg.Lookback))
	f.mu.Unlock()
	for id := range f.seen {
		if id < floor {
			delete(f.seen, id) // below the floor: never listed again
		}
	}
	return found
}

// failed notes a failed poll: the first failure of an outage is logged.
func (f *Feed) failed(ctx context.Context, err error) {
	if ctx.Err() != nil || f.outage {
		return
	}
	f.outage = true
	f.log.WarnContext(ctx, "events: audit log unreadable, retrying at each poll", "err", err)
}

// readEvent reads and translates the audit event at key. A missing object
// (deleted since the listing) becomes no frames; an undecodable one
// errSkip.
func readEvent(ctx context.Context, s *storage.Store, tr *translator, key, id string) (batch, error) {
	raw, err := getEvent(ctx, s, key)
	if err != nil {
		return batch{}, err
	}
	return translateEvent(ctx, tr, id, raw)
}

// getEvent reads the audit object at key: nil for a missing one.
func getEvent(ctx context.Context, s *storage.Store, key string) ([]byte, error) {
	raw, _, err := s.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	return raw, err
}

// translateEvent decodes and translates the audit object raw (nil: gone,
// no frames).
func translateEvent(ctx context.Context, tr *translator, id string, raw []byte) (batch, error) {
	if raw == nil {
		return batch{id: id}, nil
	}
	var ev lifecycle.AuditEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return batch{id: id}, errors.Join(errSkip, err)
	}
	return tr.translateAll(ctx, id, records.Expand(ev, id))
}

// broadcast hands b to every client that wants it, never waiting: a client
// whose buffer is full is dropped (or, while it replays, told to catch up
// from the store).
func (f *Feed) broadcast(ctx context.Context, b batch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.clients {
		if (c.run != "" && c.run != b.run) || !b.seenBy(c.tenant) {
			continue
		}
		select {
		case c.ch <- b:
			continue
		default:
		}
		if c.replaying {
			c.overflow = true
			continue
		}
		delete(f.clients, c)
		f.dropped++
		close(c.drop)
		c.abort()
		f.log.WarnContext(ctx, "events: slow client dropped", "remote", c.remote, "buffer", cap(c.ch))
	}
}
