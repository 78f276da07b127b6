package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// TestWatchInbox: the stats now, then at every change: over the event
// stream at once, or without one at the next read of the 30 s
// poll on the client's clock.
func TestWatchInbox(t *testing.T) {
	t.Parallel()
	for _, streamed := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", streamed), func(t *testing.T) {
			t.Parallel()
			var o rigOpts
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			feedDone := make(chan struct{})
			if streamed {
				// The rig's store is made inside newRig: a feed over a
				// store given after is attached below.
				o.events = &lateFeed{ready: make(chan *events.Feed, 1)}
			}
			g := newRig(t, o)
			if streamed {
				f, err := events.New(events.Config{Store: g.store, PollInterval: 20 * time.Millisecond,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					t.Fatal(err)
				}
				o.events.(*lateFeed).ready <- f
				fctx, stop := context.WithCancel(context.Background())
				go func() { _ = f.Run(fctx); close(feedDone) }()
				defer func() { stop(); <-feedDone }()
			}
			clk := clock.NewFake(epoch0)
			c := g.client(lifecycle.ActorFrontend)
			c.Clock = clk
			got := make(chan lifecycle.InboxStats)
			wctx, stop := context.WithCancel(ctx)
			watchDone := make(chan struct{})
			go func() {
				defer close(watchDone)
				for st, err := range c.WatchInbox(wctx) {
					if err != nil {
						t.Errorf("WatchInbox: %v", err)
						return
					}
					select {
					case got <- st:
					case <-wctx.Done():
						return
					}
				}
			}()
			defer func() { stop(); <-watchDone }()
			next := func(what string) lifecycle.InboxStats {
				select {
				case st := <-got:
					return st
				case <-ctx.Done():
					t.Fatalf("no stats %s", what)
					return lifecycle.InboxStats{}
				}
			}
			if st := next("at first"); st.Pending != 0 {
				t.Fatalf("first stats %+v", st)
			}
			if _, err := g.client(lifecycle.ActorGateway).SubmitInbox(ctx, lifecycle.InboxSubmission{Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
				Intent: lifecycle.InboxIntent{Action: "propose-edit", Target: "notes/x"}}); err != nil {
				t.Fatal(err)
			}
			if !streamed {
				<-clk.WaitForTimers(1)
				select {
				case st := <-got:
					t.Fatalf("stats %+v before the poll was due", st)
				default:
				}
				clk.Advance(30 * time.Second)
			}
			if st := next("after a submit"); st.Pending != 1 || st.Total != 1 {
				t.Fatalf("stats after a submit %+v", st)
			}
		})
	}
}

// lateFeed serves the feed it is handed once the rig's store exists.
type lateFeed struct {
	ready chan *events.Feed
	once  sync.Once
	feed  *events.Feed
}

func (l *lateFeed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.once.Do(func() { l.feed = <-l.ready })
	l.feed.ServeHTTP(w, r)
}
