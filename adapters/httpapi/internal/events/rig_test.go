package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/testlog"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// env is this binary's MinIO, started by the first benchmark that needs it.
var env teststores.Env

func TestMain(m *testing.M) { goleak.VerifyTestMain(env.Wrap(m)) }

var t0 = time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)

// guard bounds, in wall time, a wait for something the code under test
// must do promptly; it only fails a broken test, it never paces one.
const guard = 20 * time.Second

// backend is a store of a real adapter, and a second handle on the same
// data as another process would open it.
type backend struct {
	name string
	open func(t *testing.T) (store, other *storage.Store)
}

var backends = []backend{
	{"memstore", func(*testing.T) (*storage.Store, *storage.Store) { s := memstore.New(); return s, s }},
	{"filestore", func(t *testing.T) (*storage.Store, *storage.Store) {
		dir := t.TempDir()
		a, err := filestore.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := filestore.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}},
}

// eachBackend runs f as a parallel subtest on every backend.
func eachBackend(t *testing.T, f func(t *testing.T, store, other *storage.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s, o := b.open(t)
			f(t, s, o)
		})
	}
}

// rig is a running Feed on a fake clock, served by httptest on 127.0.0.1.
type rig struct {
	t      *testing.T
	store  *storage.Store
	clk    *clock.Fake
	feed   *events.Feed
	srv    *httptest.Server
	polled chan struct{}
	every  time.Duration
	logs   *testlog.Buffer
}

// unwatched hides a store's Watch: the rig's feed polls on the fake
// clock, so a test decides when it lists the log.
type unwatched struct{ driver.Store }

// watched marks a store whose Watch the rig's feed is to use.
type watched struct{ driver.Store }

func (w watched) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return w.Store.(driver.Watcher).Watch(ctx, prefix)
}

func newRig(t *testing.T, store *storage.Store, cfg events.Config) *rig {
	t.Helper()
	if _, ok := store.Unwrap().(watched); !ok {
		store = storage.New(unwatched{store})
	}
	clk, ok := cfg.Clock.(*clock.Fake)
	if !ok {
		clk = clock.NewFake(t0)
	}
	logs := &testlog.Buffer{}
	if cfg.IdlePollInterval == 0 {
		// Polls every PollInterval, idle or not, so a test's poll() is one
		// listing; TestIdleFeedBacksOff tests the backoff.
		cfg.IdlePollInterval = max(cfg.PollInterval, events.DefaultPollInterval)
	}
	cfg.Store, cfg.Clock = store, clk
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	feed, err := events.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, store: store, clk: clk, feed: feed, polled: make(chan struct{}, 1), every: cfg.PollInterval, logs: logs}
	if r.every == 0 {
		r.every = events.DefaultPollInterval
	}
	events.OnPoll(feed, func() {
		select {
		case r.polled <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- feed.Run(ctx) }()
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// The server's authentication gives the feed the token's tenant.
		if t := req.Header.Get(tenantHeader); t != "" {
			req = req.WithContext(lifecycle.WithTenant(req.Context(), t))
		}
		feed.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
		r.srv.Close() // waits for the handlers: the streams must have ended
	})
	r.wait(r.polled, "the first poll")
	return r
}

func (r *rig) wait(ch <-chan struct{}, what string) {
	r.t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		r.t.Fatalf("timed out waiting for %s", what)
	}
}

// poll moves the fake clock to the feed's next poll and waits until the
// poll is over (its events handed to the clients).
func (r *rig) poll() {
	r.t.Helper()
	r.clk.Advance(r.every)
	r.wait(r.polled, "a poll")
}

// stream is one client of the feed.
type stream struct {
	t      *testing.T
	ch     chan events.Event
	cancel context.CancelFunc
	start  func()
	body   io.ReadCloser
	once   sync.Once
}

// open connects a client with the given query and Last-Event-ID header.
// Once open returns, the client is subscribed (the handler subscribes
// before it sends the response headers).
func (r *rig) open(query, lastID string) *stream {
	r.t.Helper()
	s, start := r.openPaused(query, lastID)
	start()
	return s
}

// tenantHeader names, to the rig's server, the tenant a client acts for.
const tenantHeader = "X-Test-Tenant"

// openAs is open("", "") by a client acting for tenant.
func (r *rig) openAs(tenant string) *stream {
	r.t.Helper()
	s, start := r.connect("", "", tenant)
	start()
	return s
}

// openPaused is open with a client that reads nothing until start.
func (r *rig) openPaused(query, lastID string) (*stream, func()) {
	r.t.Helper()
	return r.connect(query, lastID, "")
}

func (r *rig) connect(query, lastID, tenant string) (*stream, func()) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.srv.URL+"/events/stream"+query, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	if tenant != "" {
		req.Header.Set(tenantHeader, tenant)
	}
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		cancel()
		r.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		r.t.Fatalf("GET /events/stream%s: %s %q", query, resp.Status, resp.Header.Get("Content-Type"))
	}
	s := &stream{t: r.t, ch: make(chan events.Event, 4096), cancel: cancel, body: resp.Body}
	gate := make(chan struct{})
	go func() {
		defer close(s.ch)
		<-gate
		for ev, err := range events.Read(resp.Body) {
			if err != nil {
				return
			}
			s.ch <- ev
		}
	}()
	r.t.Cleanup(s.close)
	var once sync.Once
	s.start = func() { once.Do(func() { close(gate) }) }
	return s, s.start
}

func (s *stream) close() {
	s.once.Do(func() {
		s.start()
		s.cancel()
		s.body.Close()
		for range s.ch {
		}
	})
}

// until polls once, then reads s until an event for which stop is true,
// and returns every event s received up to it. What it waits for must be
// in the store already: one poll sends it.
func (r *rig) until(s *stream, stop func(events.Event) bool) []events.Event {
	r.t.Helper()
	r.poll()
	var got []events.Event
	for {
		select {
		case ev, ok := <-s.ch:
			if !ok {
				r.t.Fatalf("stream ended after %s\nlog:\n%s", show(got), r.logs.String())
			}
			got = append(got, ev)
			if stop(ev) {
				return got
			}
		case <-time.After(guard):
			r.t.Fatalf("the awaited event did not come; got %s\nlog:\n%s", show(got), r.logs.String())
		}
	}
}

// untilID polls until the event with id arrives.
func (r *rig) untilID(s *stream, id string) []events.Event {
	r.t.Helper()
	return r.until(s, func(ev events.Event) bool { return ev.ID == id })
}

func show(evs []events.Event) string {
	var b strings.Builder
	b.WriteString("[")
	for _, ev := range evs {
		b.WriteString("\n  " + ev.ID + " " + ev.Type + " " + string(ev.Data))
	}
	return b.String() + "\n]"
}

// record writes an audit event as another process would, stamped by the
// fake clock unless ev.TS is set.
func (r *rig) record(store *storage.Store, ev lifecycle.AuditEvent) lifecycle.AuditEvent {
	r.t.Helper()
	if ev.Actor == "" {
		ev.Actor = "orchestration-layer"
	}
	r.clk.Advance(time.Microsecond) // events of one instant would sort at random
	l := &records.AuditLog{Store: store, Node: "other-node", Now: r.clk.Now}
	ev, err := l.Record(context.Background(), ev)
	if err != nil {
		r.t.Fatal(err)
	}
	return ev
}

// marker writes a job event no test expects otherwise; a stream that has
// received it has received everything polled before.
func (r *rig) marker(store *storage.Store, name string) lifecycle.AuditEvent {
	r.clk.Advance(time.Millisecond) // after every event stamped so far
	return r.record(store, lifecycle.AuditEvent{Event: "job.status.update", JobID: "marker-" + name, From: "QUEUED", To: "CONTEXT_ASSEMBLY"})
}

// wire renders events as "type data" lines for comparison.
func wire(evs []events.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		var c bytes.Buffer
		_ = json.Compact(&c, ev.Data)
		out[i] = ev.Type + " " + c.String()
	}
	return out
}

func ids(evs []events.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}
