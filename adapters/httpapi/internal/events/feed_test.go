package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got  %q\n want %q", what, got, want)
	}
}

// TestAnotherProcess: events written through another handle on the store
// (for filestore, another Store on the same directory, as another process
// opens it) reach every stream, in id order, each once.
func TestAnotherProcess(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, store, other *storage.Store) {
		r := newRig(t, store, events.Config{})
		a, b := r.open("", ""), r.open("", "")
		r.clk.Advance(time.Millisecond) // distinct stamps
		e1 := r.record(other, lifecycle.AuditEvent{Event: "job.create", JobID: "job-1", RunID: "run-1", To: "PENDING"})
		r.clk.Advance(time.Millisecond)
		e2 := r.record(other, lifecycle.AuditEvent{Event: "nlm.status.update", JobID: "nlm-1", From: "ACCEPTED", To: "FETCHING_CONTEXT"})
		r.clk.Advance(time.Millisecond)
		e3 := r.record(other, lifecycle.AuditEvent{Event: "inbox.status.update", EntryID: "inbox_1", From: "pending", To: "rejected"})
		r.record(other, lifecycle.AuditEvent{Event: "artifact.create", ArtifactID: "a1", To: "final"}) // not published
		for range 3 {                                                                                  // polls within Lookback list the events again: sent once all the same
			r.poll()
		}
		m := r.marker(other, "end")
		want := []string{
			`job.status.changed {"type":"job.status.changed","jobId":"job-1","status":"PENDING","from":""}`,
			`nlm.status.changed {"type":"nlm.status.changed","jobId":"nlm-1","status":"FETCHING_CONTEXT","from":"ACCEPTED"}`,
			`inbox.status.changed {"type":"inbox.status.changed","entryId":"inbox_1","status":"rejected","from":"pending"}`,
			`job.status.changed {"type":"job.status.changed","jobId":"marker-end","status":"CONTEXT_ASSEMBLY","from":"QUEUED"}`,
		}
		for _, s := range []*stream{a, b} {
			got := r.untilID(s, m.ID)
			eq(t, "events", wire(got), want)
			eq(t, "ids", ids(got), []string{e1.ID, e2.ID, e3.ID, m.ID})
		}
	})
}

// TestSDKEvents: every event type of the contract, made by real SDK calls
// on the store: a Runner's run, an inbox, a job queue.
func TestSDKEvents(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, store, other *storage.Store) {
		ctx := t.Context()
		r := newRig(t, store, events.Config{})
		s := r.open("", "")

		// A run of two steps; the second waits for the test, so the first
		// count is seen before the second.
		started, gate := make(chan struct{}), make(chan struct{})
		steps := []run.Step{
			{Name: "one", Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }},
			{Name: "two", Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
				close(started) // step one is counted before step two starts
				select {
				case <-gate:
				case <-ctx.Done():
				}
				return run.StepOutput{}, ctx.Err()
			}},
		}
		runner, err := run.NewRunner(run.Config{Store: other, Clock: r.clk, Owner: "runner-b", Node: "b"}, run.Agent{Slug: "archivist", Steps: steps})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { _ = runner.Run(rctx) })
		defer func() { stop(); wg.Wait() }()
		res, err := runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "archivist"})
		if err != nil {
			t.Fatal(err)
		}
		id := res.RunID
		r.wait(started, "step two")
		runEv := func(status, from string) string {
			return fmt.Sprintf(`run.status.changed {"type":"run.status.changed","runId":%q,"agentSlug":"archivist","status":%q,"from":%q}`, id, status, from)
		}
		step := func(n int) string {
			return fmt.Sprintf(`run.step.completed {"type":"run.step.completed","runId":%q,"agentSlug":"archivist","step":%d}`, id, n)
		}
		// The runner writes on a clock that does not move while it works,
		// so its events of one instant sort among themselves at random:
		// compare them as sets.
		n := 0
		got := wire(r.until(s, func(events.Event) bool { n++; return n == 4 }))
		want := []string{runEv("requested", ""), runEv("queued", "requested"), runEv("running", "queued"), step(1)}
		slices.Sort(got)
		slices.Sort(want)
		eq(t, "run events to step 1", got, want)
		close(gate)
		if st, err := runner.Wait(ctx, id); err != nil || st.Status != "completed" {
			t.Fatalf("Wait = %+v, %v", st, err)
		}
		last := r.until(s, func(ev events.Event) bool { p, _ := ev.Payload(); return p.Status == "completed" })
		eq(t, "run events to the end", wire(last), []string{step(2), runEv("completed", "running")})
		// One audit event made both: only the last carries its id, so a
		// client cut off between them resumes before the first.
		if len(last) == 2 && (last[0].ID == last[1].ID || last[1].ID <= last[0].ID) {
			t.Errorf("ids %q then %q: the step's event must keep the id before the audit event's", last[0].ID, last[1].ID)
		}

		// Inbox: two submits, each counted; then one processed.
		box, err := inbox.New(inbox.Config{Store: other, Clock: r.clk})
		if err != nil {
			t.Fatal(err)
		}
		sub := func(id string) {
			if _, err := box.Submit(ctx, lifecycle.ActorGateway, lifecycle.InboxSubmission{ID: id,
				Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"}, Intent: lifecycle.InboxIntent{Action: "propose-edit", Target: "notes/x"}}); err != nil {
				t.Fatal(err)
			}
		}
		sub("inbox_a")
		evs := r.until(s, func(ev events.Event) bool { return ev.Type == events.TypeInboxNew })
		sub("inbox_b")
		evs = append(evs, r.until(s, func(ev events.Event) bool { return ev.Type == events.TypeInboxNew })...)
		if _, err := box.Process(ctx, lifecycle.ActorGateway, "inbox_a", "proposal-1"); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, r.until(s, func(ev events.Event) bool { return ev.Type == events.TypeInboxStatusChanged })...)
		eq(t, "inbox events", wire(evs), []string{
			`inbox.new {"type":"inbox.new","entryId":"inbox_a","count":1}`,
			`inbox.new {"type":"inbox.new","entryId":"inbox_b","count":2}`,
			`inbox.status.changed {"type":"inbox.status.changed","entryId":"inbox_a","status":"processed","from":"pending"}`,
		})

		// Job queue: an enqueue is a creation and its validation; the queue
		// writes them with the moves that bring the job to rest (issue 12),
		// here a failed first attempt, all in one audit object.
		q, err := jobqueue.New(jobqueue.Config{Store: other, Clock: r.clk, Node: "b"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: "job-7", RunID: id, JobType: lifecycle.JobBrief, AgentSlug: "archivist"}); err != nil {
			t.Fatal(err)
		}
		c, err := q.Claim(ctx, "w")
		if err != nil || c == nil {
			t.Fatalf("claim: %v %v", c, err)
		}
		if _, err := c.Run(ctx, jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{}, errors.New("unavailable")
		}}); err != nil {
			t.Fatal(err)
		}
		evs = r.until(s, func(ev events.Event) bool { p, _ := ev.Payload(); return p.Status == "RETRY_BACKOFF" })
		eq(t, "job events", wire(evs), []string{
			`job.status.changed {"type":"job.status.changed","jobId":"job-7","status":"PENDING","from":""}`,
			`job.status.changed {"type":"job.status.changed","jobId":"job-7","status":"QUEUED","from":"PENDING"}`,
			`job.status.changed {"type":"job.status.changed","jobId":"job-7","status":"CONTEXT_ASSEMBLY","from":"QUEUED"}`,
			`job.status.changed {"type":"job.status.changed","jobId":"job-7","status":"NOTEBOOKLM_CALL","from":"CONTEXT_ASSEMBLY"}`,
			`job.status.changed {"type":"job.status.changed","jobId":"job-7","status":"RETRY_BACKOFF","from":"NOTEBOOKLM_CALL"}`,
		})
	})
}

// TestResume: a client that comes back with Last-Event-ID gets exactly the
// events it missed, some from the store and some live, then live ones, with
// no duplicate and no gap.
func TestResume(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"header", "query"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, store, other *storage.Store) {
				r := newRig(t, store, events.Config{})
				job := func(n int) lifecycle.AuditEvent {
					r.clk.Advance(time.Millisecond)
					return r.record(other, lifecycle.AuditEvent{Event: "job.status.update", JobID: fmt.Sprintf("job-%d", n), From: "QUEUED", To: "CONTEXT_ASSEMBLY"})
				}
				s := r.open("", "")
				e1, e2 := job(1), job(2)
				eq(t, "first connection", ids(r.untilID(s, e2.ID)), []string{e1.ID, e2.ID})
				s.close()

				e3 := job(3)
				r.poll() // sent live while the client is away
				e4 := job(4)
				// e4 is not polled yet: the replay sends it, and the live
				// feed must not send it again.
				var s2 *stream
				if how == "header" {
					s2 = r.open("", e2.ID)
				} else {
					s2 = r.open("?last_event_id="+e2.ID, "")
				}
				e5 := job(5)
				got := r.untilID(s2, e5.ID)
				m := r.marker(other, "end")
				got = append(got, r.untilID(s2, m.ID)...)
				eq(t, "resumed", ids(got), []string{e3.ID, e4.ID, e5.ID, m.ID})
			})
		})
	}
}

// gatedStore holds the first Get of one key until released: a slow read,
// in a replay, of a real store.
type gatedStore struct {
	driver.Store
	mu       sync.Mutex
	key      string
	once     sync.Once
	reached  chan struct{}
	released chan struct{}
}

func (g *gatedStore) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	g.mu.Lock()
	gated := key == g.key
	g.mu.Unlock()
	if gated {
		first := false
		g.once.Do(func() { first = true; close(g.reached) })
		if first {
			<-g.released
		}
	}
	return g.Store.Get(ctx, key)
}

// TestResumeOverflowDuringReplay: live events that overflow the buffer of
// a client still replaying are not lost, and it is not dropped: it reads
// them from the store.
func TestResumeOverflowDuringReplay(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	gs := &gatedStore{Store: inner, reached: make(chan struct{}), released: make(chan struct{})}
	r := newRig(t, storage.New(gs), events.Config{Buffer: 1, Lookback: time.Second})
	job := func(name string) lifecycle.AuditEvent {
		return r.record(inner, lifecycle.AuditEvent{Event: "job.status.update", JobID: name, From: "QUEUED", To: "CONTEXT_ASSEMBLY"})
	}
	first := job("job-0")
	var want []string
	for i := range 5 {
		want = append(want, job(fmt.Sprintf("job-%d", i+1)).ID)
	}
	for range 8 { // 2 s: the live feed is past these events for good
		r.poll()
	}
	key, _ := layout.AuditKey(t0, want[2])
	gs.mu.Lock()
	gs.key = key
	gs.mu.Unlock()
	s := r.open("", first.ID)
	r.wait(gs.reached, "the replay to read the third event")
	for i := range 5 { // the replay is stuck: these overflow its buffer
		want = append(want, job(fmt.Sprintf("live-%d", i)).ID)
		r.poll()
	}
	close(gs.released)
	m := r.marker(inner, "end")
	want = append(want, m.ID)
	eq(t, "resumed", ids(r.untilID(s, m.ID)), want)
	if r.feed.Dropped() != 0 {
		t.Fatalf("a replaying client was dropped")
	}
}

// TestLateEvent: an event stamped behind the cursor but within Lookback (a
// lagging clock, a slow writer) is still sent, once; one beyond is not.
func TestLateEvent(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, store, other *storage.Store) {
		r := newRig(t, store, events.Config{Lookback: 10 * time.Second})
		s := r.open("", "")
		e1 := r.record(other, lifecycle.AuditEvent{Event: "job.status.update", JobID: "job-1", From: "QUEUED", To: "CONTEXT_ASSEMBLY"})
		for range 8 { // 2 s
			r.poll()
		}
		late := r.record(other, lifecycle.AuditEvent{TS: r.clk.Now().Add(-7 * time.Second), Event: "job.status.update", JobID: "late", From: "QUEUED", To: "CONTEXT_ASSEMBLY"})
		tooLate := r.record(other, lifecycle.AuditEvent{TS: r.clk.Now().Add(-30 * time.Second), Event: "job.status.update", JobID: "too-late", From: "QUEUED", To: "CONTEXT_ASSEMBLY"})
		if late.ID > e1.ID || tooLate.ID > e1.ID {
			t.Fatal("the late events must sort before the first")
		}
		for range 8 {
			r.poll()
		}
		m := r.marker(other, "end")
		eq(t, "events", ids(r.untilID(s, m.ID)), []string{e1.ID, late.ID, m.ID})
	})
}

// TestMidnight: an event of the previous day, listed after midnight, is
// sent.
func TestMidnight(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	r := newRig(t, store, events.Config{})
	r.clk.Advance(time.Date(2026, 2, 24, 23, 59, 59, 900_000_000, time.UTC).Sub(r.clk.Now()))
	r.poll()
	s := r.open("", "")
	ev := r.record(store, lifecycle.AuditEvent{TS: time.Date(2026, 2, 24, 23, 59, 59, 999_000_000, time.UTC), Event: "job.create", JobID: "j", To: "PENDING"})
	r.poll() // now 00:00:00.15 on the 25th
	if !strings.HasPrefix(r.clk.Now().Format(time.RFC3339), "2026-02-25") {
		t.Fatalf("clock at %v", r.clk.Now())
	}
	m := r.marker(store, "end")
	eq(t, "events", ids(r.untilID(s, m.ID)), []string{ev.ID, m.ID})
}

// TestRunFilter: ?run= keeps the run's own events and its jobs'.
func TestRunFilter(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	r := newRig(t, store, events.Config{})
	s := r.open("?run=run-1", "")
	all := r.open("", "")
	r.record(store, lifecycle.AuditEvent{Event: "run.status.update", RunID: "run-2", To: "requested"})
	a := r.record(store, lifecycle.AuditEvent{Event: "run.status.update", RunID: "run-1", To: "requested"})
	r.record(store, lifecycle.AuditEvent{Event: "job.create", JobID: "j2", RunID: "run-2", To: "PENDING"})
	b := r.record(store, lifecycle.AuditEvent{Event: "job.create", JobID: "j1", RunID: "run-1", To: "PENDING"})
	r.record(store, lifecycle.AuditEvent{Event: "inbox.status.update", EntryID: "e", From: "pending", To: "processed"})
	c := r.record(store, lifecycle.AuditEvent{Event: "run.status.update", RunID: "run-1", From: "requested", To: "queued"})
	got := r.untilID(s, c.ID)
	eq(t, "filtered", ids(got), []string{a.ID, b.ID, c.ID})
	if n := len(r.untilID(all, c.ID)); n != 6 {
		t.Fatalf("unfiltered stream got %d events, want 6", n)
	}
	resp, err := r.srv.Client().Get(r.srv.URL + "?run=../x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad run id: %s", resp.Status)
	}
}

// TestUndecodableSkipped: an audit object that is not JSON is skipped with
// a warning; the events around it are sent.
func TestUndecodableSkipped(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, store, other *storage.Store) {
		r := newRig(t, store, events.Config{})
		s := r.open("", "")
		e1 := r.record(other, lifecycle.AuditEvent{Event: "job.create", JobID: "j1", To: "PENDING"})
		r.clk.Advance(time.Millisecond)
		key, _ := layout.AuditKey(r.clk.Now(), records.NewAuditEventID(r.clk.Now()))
		if _, err := other.Put(t.Context(), key, []byte("{not json"), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
		r.clk.Advance(time.Millisecond)
		e2 := r.record(other, lifecycle.AuditEvent{Event: "job.create", JobID: "j2", To: "PENDING"})
		eq(t, "events", ids(r.untilID(s, e2.ID)), []string{e1.ID, e2.ID})
		r.poll()
		if n := r.logs.Count(`level=WARN msg="events: audit event skipped"`); n != 1 {
			t.Fatalf("%d skip warnings, want 1", n)
		}
	})
}

// TestOutage: a store outage delays events, never loses them, and is
// logged once.
func TestOutage(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	fs := faultstore.New(inner)
	r := newRig(t, storage.New(fs), events.Config{})
	s := r.open("", "")
	fs.Down()
	e1 := r.record(inner, lifecycle.AuditEvent{Event: "job.create", JobID: "j1", To: "PENDING"})
	for range 80 { // 20 s down: longer than Lookback, so the cursor must hold
		r.poll()
	}
	fs.Up()
	e2 := r.record(inner, lifecycle.AuditEvent{Event: "job.create", JobID: "j2", To: "PENDING"})
	eq(t, "events", ids(r.untilID(s, e2.ID)), []string{e1.ID, e2.ID})
	if n := r.logs.Count("level=WARN msg=\"events: audit log unreadable"); n != 1 {
		t.Fatalf("%d outage warnings, want 1:\n%s", n, r.logs.String())
	}
}

// blockedWriter is a client that never reads: its first write blocks until
// the server gives up on it (a write deadline in the past).
type blockedWriter struct {
	h      http.Header
	once   sync.Once
	called chan struct{} // closed at the first Write
	mu     sync.Mutex
	cut    chan struct{}
	closed bool
}

func (w *blockedWriter) Header() http.Header { return w.h }
func (w *blockedWriter) WriteHeader(int)     {}
func (w *blockedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.called) })
	<-w.cut
	return 0, fmt.Errorf("write deadline exceeded")
}
func (w *blockedWriter) FlushError() error { return nil }
func (w *blockedWriter) SetWriteDeadline(d time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !d.IsZero() && d.Before(time.Now()) && !w.closed {
		w.closed = true
		close(w.cut)
	}
	return nil
}

// TestSlowClientDropped: a client that stops reading is dropped once its
// buffer is full, with a warning, while a fast one gets every event.
func TestSlowClientDropped(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	r := newRig(t, store, events.Config{Buffer: 2})
	fast := r.open("", "")
	slow := &blockedWriter{h: http.Header{}, cut: make(chan struct{}), called: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/events/stream", nil)
	go func() { defer close(done); r.feed.ServeHTTP(slow, req) }()
	r.wait(slow.called, "the slow client's first write") // it subscribed before
	var want []string
	for i := range 5 { // the fast client reads each event before the next
		want = append(want, r.record(store, lifecycle.AuditEvent{Event: "job.create", JobID: fmt.Sprintf("j%d", i), To: "PENDING"}).ID)
		eq(t, "fast client", ids(r.untilID(fast, want[i])), want[i:])
	}
	r.wait(done, "the slow client's handler to end")
	if r.feed.Dropped() != 1 || r.feed.Clients() != 1 {
		t.Fatalf("dropped %d, clients %d; want 1, 1", r.feed.Dropped(), r.feed.Clients())
	}
	if r.logs.Count(`level=WARN msg="events: slow client dropped"`) != 1 {
		t.Fatal("no warning for the dropped client")
	}
}

// TestHeartbeat: an idle stream gets ": ping" every Heartbeat of the
// feed's clock.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	r := newRig(t, store, events.Config{Heartbeat: 15 * time.Second, PollInterval: 5 * time.Second, Retry: 2 * time.Second})
	resp, err := r.srv.Client().Get(r.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		buf := make([]byte, 256)
		var acc string
		for {
			n, err := resp.Body.Read(buf)
			acc += string(buf[:n])
			for {
				i := strings.IndexByte(acc, '\n')
				if i < 0 {
					break
				}
				lines <- acc[:i]
				acc = acc[i+1:]
			}
			if err != nil {
				return
			}
		}
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(guard):
			t.Fatal("no line")
			return ""
		}
	}
	if l := next(); l != "retry: 2000" {
		t.Fatalf("first line %q", l)
	}
	next() // the blank line ending it
	for range 2 {
		<-r.clk.WaitForTimers(2) // the poll and the stream's heartbeat
		r.poll()
		r.poll()
		select {
		case l := <-lines:
			t.Fatalf("line %q before the heartbeat", l)
		default:
		}
		r.poll() // 15 s
		if l := next(); l != ": ping" {
			t.Fatalf("got %q, want a ping", l)
		}
		next()
	}
}

// TestShutdown: open streams end when Run returns, and a new one is
// refused.
func TestShutdown(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	feed, err := events.New(events.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(feed)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- feed.Run(ctx) }()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for _, err := range events.Read(resp.Body) {
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-ended:
	case <-time.After(guard):
		t.Fatal("stream still open after Run returned")
	}
	resp2, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after shutdown: %s", resp2.Status)
	}
	if err := feed.Run(context.Background()); err == nil {
		t.Fatal("a second Run was accepted")
	}
}

func TestNewNeedsStore(t *testing.T) {
	t.Parallel()
	if _, err := events.New(events.Config{}); err == nil {
		t.Fatal("a feed without a store was accepted")
	}
}

// TestMaxClients: a stream past MaxClients is refused with 503 and
// Retry-After; a bad method with 405.
func TestMaxClients(t *testing.T) {
	t.Parallel()
	r := newRig(t, memstore.New(), events.Config{MaxClients: 1})
	r.open("", "")
	resp, err := r.srv.Client().Get(r.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second stream: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	resp, err = r.srv.Client().Post(r.srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %s", resp.Status)
	}
}
