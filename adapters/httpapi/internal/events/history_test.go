package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// fill writes n job audit events straight to the store, stamped every
// step from start on (as many processes would have over a day), and
// returns their ids.
func fill(tb testing.TB, s *storage.Store, n int, start time.Time, step time.Duration) []string {
	tb.Helper()
	ids := make([]string, n)
	for i := range n {
		ts := start.Add(time.Duration(i) * step)
		ev := lifecycle.AuditEvent{TS: ts, Event: "job.status.update", Actor: "orchestration-layer",
			JobID: fmt.Sprintf("job-%d", i), From: "QUEUED", To: "CONTEXT_ASSEMBLY"}
		ev.ID = records.AuditEventID(ts, ev.JobID, 1, 0)
		b, err := json.Marshal(ev)
		if err != nil {
			tb.Fatal(err)
		}
		key, err := layout.AuditKey(ts, ev.ID)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := s.Put(context.Background(), key, b, storage.IfNotExists()); err != nil {
			tb.Fatal(err)
		}
		ids[i] = ev.ID
	}
	return ids
}

// TestIdlePollFlat: an idle poll costs one small listing whatever the day
// holds: no key of the history is listed, none read. (The feed used to
// list the whole day's prefix at every poll: n keys.)
func TestIdlePollFlat(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			count := &teststores.Counting{Store: memstore.New()}
			day := t0.Truncate(24 * time.Hour)
			fill(t, storage.New(count), n, day, (t0.Sub(day)-time.Minute)/time.Duration(n)) // today, before the window
			r := newRig(t, storage.New(count), events.Config{})
			count.Reset()
			const polls = 4
			for range polls {
				r.poll()
			}
			if l, k, g := count.Lists.Load(), count.Listed.Load(), count.Gets.Load(); l != polls || k != 0 || g != 0 {
				t.Fatalf("%d idle polls over %d events: %d listings of %d keys, %d reads; want %d, 0, 0", polls, n, l, k, g, polls)
			}
		})
	}
}

// TestTailAcrossDays: the feed follows the log over midnight and over a day
// without events, an event written late (behind the cursor, within
// Lookback) into yesterday's folder included, each once, and an idle
// poll lists no more than the days its window touches.
func TestTailAcrossDays(t *testing.T) {
	t.Parallel()
	count := &teststores.Counting{Store: memstore.New()}
	r := newRig(t, storage.New(count), events.Config{PollInterval: time.Hour, Lookback: 10 * time.Second, Heartbeat: 1000 * time.Hour})
	s := r.open("", "")
	at := func(day, h, m, sec, ms int) time.Time { return time.Date(2026, 2, day, h, m, sec, ms*1e6, time.UTC) }
	// job writes an event stamped ts, leaving the clock on the hour.
	job := func(name string, ts time.Time) lifecycle.AuditEvent {
		l := &records.AuditLog{Store: storage.New(count), Node: "other-node"}
		ev, err := l.Record(t.Context(), lifecycle.AuditEvent{TS: ts, Actor: "orchestration-layer", Event: "job.status.update", JobID: name, From: "QUEUED", To: "CONTEXT_ASSEMBLY"})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	// until moves the clock by polls to t (polls are on the hour here).
	until := func(ts time.Time) {
		for r.clk.Now().Add(r.every).Before(ts.Add(time.Nanosecond)) {
			r.poll()
		}
	}
	var want []string
	until(at(24, 23, 0, 0, 0))
	want = append(want, job("before-midnight", at(24, 23, 59, 59, 999)).ID)
	until(at(25, 0, 0, 0, 0)) // the poll at midnight lists both days
	// Written after the midnight poll, stamped 5 ms before midnight: the
	// next poll's window still reaches into the 24th.
	want = append(want, job("late", at(24, 23, 59, 59, 995)).ID)
	until(at(25, 1, 0, 0, 0))
	want = append(want, job("after-midnight", at(25, 1, 30, 0, 0)).ID)
	until(at(27, 1, 0, 0, 0)) // the 26th: no event
	count.Reset()
	r.poll() // idle, 02:00 on the 27th
	if l, k := count.Lists.Load(), count.Listed.Load(); l != 1 || k != 0 {
		t.Fatalf("an idle poll listed %d folders, %d keys; want 1, 0", l, k)
	}
	want = append(want, job("two-days-later", r.clk.Now()).ID)
	m := r.marker(storage.New(count), "end")
	want = append(want, m.ID)
	eq(t, "events", ids(r.untilID(s, m.ID)), want)
}

// TestResumePaging: a resume from an old event reads the store a page at a
// time, across day folders, then goes on live, each event once.
func TestResumePaging(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, store, other *storage.Store) {
		count := &teststores.Counting{Store: store}
		// 3 days of history, 13 events a day, the last ones today before t0.
		var hist []string
		for d := 2; d >= 0; d-- {
			hist = append(hist, fill(t, other, 13, t0.Add(-time.Duration(d)*24*time.Hour-time.Hour), time.Minute)...)
		}
		r := newRig(t, storage.New(count), events.Config{ReplayPage: 4})
		count.Reset()
		s := r.open("", hist[0])
		live := r.marker(other, "live")
		got := ids(r.untilID(s, live.ID))
		eq(t, "resumed", got, append(hist[1:len(hist):len(hist)], live.ID))
		// One listing per day folder (held open across pages), not one per
		// page: 3 days, plus the live polls'.
		if l := count.Lists.Load(); l > 3+2 {
			t.Errorf("%d listings for a resume over 3 days", l)
		}
	})
}

// TestResumeTypedAnswers: a Last-Event-ID the feed cannot resume from
// exactly opens the stream with a stream.reset that says why, then the
// events the store still has after it.
func TestResumeTypedAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		last   func(hist []string) string
		reason string
		from   int // the first event of hist replayed; -1: none
	}{
		{"in the store", func(h []string) string { return h[1] }, "", 2},
		{"gone", func([]string) string { return records.AuditEventID(t0.Add(-90*time.Minute), "deleted", 1, 0) }, events.ResetGone, 1},
		{"too old", func([]string) string { return records.AuditEventID(t0.Add(-8*24*time.Hour), "x", 1, 0) }, events.ResetTooOld, 0},
		{"not an id", func([]string) string { return "hello" }, events.ResetInvalid, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := memstore.New()
			hist := fill(t, store, 1, t0.Add(-6*24*time.Hour), 0) // inside MaxReplay
			hist = append(hist, fill(t, store, 3, t0.Add(-time.Hour), time.Minute)...)
			r := newRig(t, store, events.Config{MaxReplay: 7 * 24 * time.Hour})
			s := r.open("", tc.last(hist))
			m := r.marker(store, "end")
			got := r.untilID(s, m.ID)
			var want []string
			if tc.reason != "" {
				if len(got) == 0 || got[0].Type != events.TypeStreamReset || got[0].ID != "" {
					t.Fatalf("first event %s; want a stream.reset without id", show(got))
				}
				if p, _ := got[0].Payload(); p.Reason != tc.reason {
					t.Fatalf("reason %q, want %q", p.Reason, tc.reason)
				}
				got = got[1:]
			}
			if tc.from >= 0 {
				want = append(want, hist[tc.from:]...)
			}
			eq(t, "events", ids(got), append(want, m.ID))
		})
	}
}

// TestReplaysCapped: with MaxReplays 1, a second resume waits while the
// first reads its page, and both then get every event.
func TestReplaysCapped(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	hist := fill(t, inner, 10, t0.Add(-time.Hour), time.Minute)
	gs := &gatedStore{Store: inner, reached: make(chan struct{}), released: make(chan struct{})}
	gs.key, _ = layout.AuditKey(t0.Add(-time.Hour), hist[3])
	r := newRig(t, storage.New(gs), events.Config{MaxReplays: 1})
	waiting := make(chan struct{}, 1)
	events.OnReplayWait(r.feed, func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	a := r.open("", hist[0])
	r.wait(gs.reached, "the first replay to read its page")
	b := r.open("", hist[5])
	r.wait(waiting, "the second replay to wait for its turn")
	close(gs.released)
	m := r.marker(inner, "end")
	eq(t, "first", ids(r.untilID(a, m.ID)), append(hist[1:len(hist):len(hist)], m.ID))
	eq(t, "second", ids(r.untilID(b, m.ID)), append(hist[6:len(hist):len(hist)], m.ID))
}

// TestReplayRate: the replays read no more than ReplayRate events a second
// of the feed's clock, after a burst of one second's worth.
func TestReplayRate(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	hist := fill(t, store, 21, t0.Add(-time.Hour), time.Minute)
	r := newRig(t, store, events.Config{ReplayRate: 10, ReplayPage: 5, PollInterval: time.Hour, Heartbeat: 1000 * time.Hour})
	s := r.open("", hist[0])
	read := func(n int) []string {
		t.Helper()
		var got []string
		for range n {
			select {
			case ev := <-s.ch:
				got = append(got, ev.ID)
			case <-time.After(guard):
				t.Fatalf("got %q, then nothing", got)
			}
		}
		return got
	}
	eq(t, "the burst", read(10), hist[1:11])
	for i := 11; i < 21; i += 5 {
		<-r.clk.WaitForTimers(2) // the poll's and the replay's
		select {
		case ev := <-s.ch:
			t.Fatalf("event %s before the replay's next turn", ev.ID)
		default:
		}
		r.clk.Advance(500 * time.Millisecond) // 5 events' worth
		eq(t, "a page", read(5), hist[i:i+5])
	}
}

// TestWatchWakes: with a store that watches, an event is sent when it is
// written (for filestore, by another handle on the folder, as another
// process writes it), without waiting for a poll of the clock.
func TestWatchWakes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, store, other *storage.Store) {
		r := newRig(t, storage.New(watched{store}), events.Config{PollInterval: time.Second, WatchPollInterval: time.Hour})
		s := r.open("", "")
		r.clk.Advance(time.Second) // the least time between two listings
		e := r.record(other, lifecycle.AuditEvent{Event: "job.create", JobID: "j1", To: "PENDING"})
		select {
		case ev := <-s.ch:
			if ev.ID != e.ID {
				t.Fatalf("got %s, want %s", ev.ID, e.ID)
			}
		case <-time.After(guard):
			t.Fatal("the write did not wake the feed")
		}
	})
}

// failGetOnce fails the first Get of one key: a read that fails half-way
// through a poll.
type failGetOnce struct {
	driver.Store
	key  string
	once sync.Once
}

func (f *failGetOnce) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	failed := false
	if key == f.key {
		f.once.Do(func() { failed = true })
	}
	if failed {
		return nil, "", errors.New("injected read failure")
	}
	return f.Store.Get(ctx, key)
}

// TestPollFailsHalfWay: a poll that fails after sending some events of a
// backlog older than Lookback (after an outage) does not send them again
// when it is retried, though its set of sent ids keeps only the window.
func TestPollFailsHalfWay(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	fs := faultstore.New(inner)
	fg := &failGetOnce{Store: fs}
	r := newRig(t, storage.New(fg), events.Config{Lookback: time.Second})
	s := r.open("", "")
	fs.Down()
	var want []string
	for i := range 3 {
		want = append(want, r.record(inner, lifecycle.AuditEvent{Event: "job.create", JobID: fmt.Sprintf("j%d", i), To: "PENDING"}).ID)
	}
	fg.key, _ = layout.AuditKey(r.clk.Now(), want[1])
	for range 8 { // 2 s down: the backlog is behind the next window
		r.poll()
	}
	fs.Up()
	r.poll() // sends j0, fails reading j1
	m := r.marker(inner, "end")
	eq(t, "events", ids(r.untilID(s, m.ID)), append(want, m.ID))
}

// TestIdleFeedBacksOff: over a store that cannot watch (S3), an idle feed
// lists the log less and less often, down to one listing per
// IdlePollInterval; the first event after the quiet spell reaches the
// stream within IdlePollInterval, and the feed polls every PollInterval
// again. (It listed four times a second, idle: a LIST request each on S3.)
func TestIdleFeedBacksOff(t *testing.T) {
	t.Parallel()
	count := &teststores.Counting{Store: memstore.New()}
	const idle = 5 * time.Second
	r := newRig(t, storage.New(count), events.Config{IdlePollInterval: idle, Heartbeat: 1000 * time.Hour})
	s := r.open("", "")
	count.Reset()
	next := func() {
		t.Helper()
		if _, ok, err := r.clk.AdvanceToNext(t.Context()); !ok || err != nil {
			t.Fatalf("no timer to move to (%v)", err)
		}
	}
	// A minute of fake time, moved timer by timer (each a poll's gap).
	start := r.clk.Now()
	for r.clk.Now().Sub(start) < time.Minute {
		next()
		r.wait(r.polled, "a poll")
	}
	lists := count.Lists.Load()
	if max := int64(time.Minute/idle) + 8; lists > max || lists < int64(time.Minute/idle) {
		t.Fatalf("%d listings in an idle minute; want %d to %d (one per %s, after the doubling from %s)", lists, time.Minute/idle, max, idle, events.DefaultPollInterval)
	}
	ev := r.record(storage.New(count), lifecycle.AuditEvent{Event: "job.status.update", JobID: "job-1", From: "QUEUED", To: "CONTEXT_ASSEMBLY"})
	quiet := r.clk.Now()
	next()
	r.wait(r.polled, "the poll after the quiet spell")
	if waited := r.clk.Now().Sub(quiet); waited > idle {
		t.Fatalf("the first event after a quiet minute waited %s for its poll; want at most %s", waited, idle)
	}
	eq(t, "events", ids(r.untilID(s, ev.ID)), []string{ev.ID})
	before := r.clk.Now()
	next()
	r.wait(r.polled, "the poll after the event")
	if gap := r.clk.Now().Sub(before); gap != events.DefaultPollInterval {
		t.Fatalf("after an event the next poll came %s later; want PollInterval %s", gap, events.DefaultPollInterval)
	}
}
