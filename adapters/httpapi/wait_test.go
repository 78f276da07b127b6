package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

var epoch0 = time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)

type waitResult struct {
	st  lifecycle.RunStatus
	err error
}

// TestWaitPollsWithoutEvents: the server has no event feed (503), so Wait
// polls the status every 5 s of the client's clock.
func TestWaitPollsWithoutEvents(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{running: true})
	clk := clock.NewFake(epoch0)
	c := g.client(lifecycle.ActorFrontend)
	c.Clock = clk
	ctx := context.Background()
	res, err := g.client(lifecycle.ActorGateway).Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan waitResult, 1)
	go func() {
		st, err := c.Wait(ctx, res.RunID)
		done <- waitResult{st, err}
	}()
	<-clk.WaitForTimers(1) // the stream was refused; Wait polls
	g.releaseSteps()
	if st := g.waitStatus(res.RunID); st.Status != string(machine.CancelableSucceeded) {
		t.Fatalf("run %s, want succeeded", st.Status)
	}
	select {
	case r := <-done:
		t.Fatalf("Wait returned %+v before its poll was due", r)
	default:
	}
	clk.Advance(5*time.Second - time.Second)
	<-clk.WaitForTimers(1) // nothing polled yet: the same timer still waits
	select {
	case r := <-done:
		t.Fatalf("Wait returned %+v after 4 s", r)
	default:
	}
	clk.Advance(time.Second)
	r := <-done
	if r.err != nil || r.st.Status != string(machine.CancelableSucceeded) || r.st.RunID != res.RunID {
		t.Fatalf("Wait = %+v, %v", r.st, r.err)
	}
}

// TestWaitUnknownRun: Wait reports a refusal at once.
func TestWaitUnknownRun(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	_, err := g.client(lifecycle.ActorGateway).Wait(context.Background(), "run-nope")
	apiError(t, err, http.StatusNotFound, codes.RunNotFound)
}

// feed is an event feed for the tests of the client's stream: it sends the
// events it is given, as the events package's feed would.
type feed struct {
	opened chan *http.Request
	events chan string
}

func newFeed() *feed {
	return &feed{opened: make(chan *http.Request, 4), events: make(chan string, 16)}
}

func (f *feed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	f.opened <- r
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-f.events:
			if !ok {
				return
			}
			fmt.Fprint(w, ev)
			w.(http.Flusher).Flush()
		}
	}
}

func TestEventsStream(t *testing.T) {
	t.Parallel()
	f := newFeed()
	g := newRig(t, rigOpts{events: f})
	c := g.client(lifecycle.ActorFrontend)
	f.events <- ": ping\n\n"
	f.events <- "id: ev-1\nevent: run.status.changed\ndata: {\"type\":\"run.status.changed\",\r\ndata: \"runId\":\"r-1\",\"status\":\"running\"}\n\n"
	f.events <- "id: ev-2\nevent: inbox.new\ndata: {\"type\":\"inbox.new\",\"count\":2}\n\n"
	close(f.events)
	var got []string
	var last error
	for ev, err := range c.Events(context.Background(), "ev-0", "r-1") {
		if err != nil {
			last = err
			break
		}
		got = append(got, ev.ID+" "+ev.Type+" "+string(ev.Data))
	}
	r := <-f.opened
	if r.Header.Get("Last-Event-ID") != "ev-0" || r.URL.Query().Get("run") != "r-1" {
		t.Errorf("stream opened with Last-Event-ID %q, run %q", r.Header.Get("Last-Event-ID"), r.URL.Query().Get("run"))
	}
	want := []string{
		"ev-1 run.status.changed {\"type\":\"run.status.changed\",\n\"runId\":\"r-1\",\"status\":\"running\"}",
		"ev-2 inbox.new {\"type\":\"inbox.new\",\"count\":2}",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("events\n%q\nwant\n%q", got, want)
	}
	if last != client.ErrStreamEnded {
		t.Errorf("stream ended with %v, want ErrStreamEnded", last)
	}
}

// TestWaitFollowsEvents: with a feed, Wait re-reads the status at the
// run's events and needs no clock.
func TestWaitFollowsEvents(t *testing.T) {
	t.Parallel()
	f := newFeed()
	g := newRig(t, rigOpts{running: true, events: f})
	clk := clock.NewFake(epoch0) // never advanced: polling would hang
	c := g.client(lifecycle.ActorFrontend)
	c.Clock = clk
	ctx := context.Background()
	res, err := g.client(lifecycle.ActorGateway).Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan waitResult, 1)
	go func() {
		st, err := c.Wait(ctx, res.RunID)
		done <- waitResult{st, err}
	}()
	<-f.opened
	g.releaseSteps()
	g.waitStatus(res.RunID)
	f.events <- "id: ev-9\nevent: run.status.changed\ndata: {\"type\":\"run.status.changed\",\"runId\":\"" + res.RunID + "\",\"status\":\"succeeded\"}\n\n"
	r := <-done // the clock never moved: the event alone ended the wait
	if r.err != nil || r.st.Status != string(machine.CancelableSucceeded) {
		t.Fatalf("Wait = %+v, %v", r.st, r.err)
	}
}

// TestWaitRereadsWhenAnEventIsLost: the stream is open but the run's end
// never comes on it (its writer died before its audit object); Wait reads
// the status every 5 s of its clock anyway and returns. Before, it waited
// on the stream for ever.
func TestWaitRereadsWhenAnEventIsLost(t *testing.T) {
	t.Parallel()
	f := newFeed()
	reads := make(chan struct{}, 8) // status reads answered
	g := newRig(t, rigOpts{running: true, events: f, served: func(r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/status") {
			reads <- struct{}{}
		}
	}})
	clk := clock.NewFake(epoch0)
	c := g.client(lifecycle.ActorFrontend)
	c.Clock = clk
	ctx := context.Background()
	res, err := g.client(lifecycle.ActorGateway).Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan waitResult, 1)
	go func() {
		st, err := c.Wait(ctx, res.RunID)
		done <- waitResult{st, err}
	}()
	<-f.opened
	// Wait's first read, and its read once the stream is open, both saw
	// the run running: from here on only the stream or a re-read can end it.
	<-reads
	<-reads
	select {
	case <-clk.WaitForTimers(1): // the re-read's timer
	case <-time.After(30 * time.Second):
		t.Fatal("Wait armed no timer while following the stream: it would wait on the stream for ever")
	}
	g.releaseSteps()
	g.waitStatus(res.RunID)
	select {
	case r := <-done:
		t.Fatalf("Wait returned %+v before its re-read was due", r)
	default:
	}
	clk.Advance(5 * time.Second)
	select {
	case r := <-done:
		if r.err != nil || r.st.Status != string(machine.CancelableSucceeded) {
			t.Fatalf("Wait = %+v, %v", r.st, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not return at its re-read")
	}
}

// downAddr returns a loopback address nothing listens on (a port just
// freed).
func downAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestWaitServerComesUp: Wait against a server that is down retries its
// connection errors with backoff on the client's clock, and returns the
// run's status once the server is up (issue 18 defect 10: it returned the
// raw dial error in 2 ms).
func TestWaitServerComesUp(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{running: true})
	res, err := g.runner.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "quick"})
	if err != nil {
		t.Fatal(err)
	}
	g.waitStatus(res.RunID)
	addr := downAddr(t)
	clk := clock.NewFake(epoch0)
	c := &client.Client{BaseURL: "http://" + addr, Token: "tok-gateway", Clock: clk}
	done := make(chan waitResult, 1)
	go func() {
		st, err := c.Wait(context.Background(), res.RunID)
		done <- waitResult{st, err}
	}()
	// Three refused dials, each followed by a backoff timer.
	backingOff := func() {
		t.Helper()
		select {
		case <-clk.WaitForTimers(1):
		case r := <-done:
			t.Fatalf("Wait returned %+v, %v while the server was down", r.st, r.err)
		}
	}
	for range 3 {
		backingOff()
		clk.Advance(5 * time.Second)
	}
	backingOff()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the freed port was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: g.srv.Config.Handler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	clk.Advance(5 * time.Second)
	r := <-done
	if r.err != nil || r.st.RunID != res.RunID || r.st.Status != string(machine.RunCompleted) {
		t.Fatalf("Wait = %+v, %v; want the completed run", r.st, r.err)
	}
}

// TestWaitServerNeverUp: against a server that never comes up Wait ends
// with its context, in a *WaitError that names the run, wraps the last
// dial error and matches the context's error.
func TestWaitServerNeverUp(t *testing.T) {
	t.Parallel()
	addr := downAddr(t)
	t.Run("fake clock, canceled", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(epoch0)
		c := &client.Client{BaseURL: "http://" + addr, Clock: clk}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := c.Wait(ctx, "run-1")
			done <- err
		}()
		backingOff := func() {
			t.Helper()
			select {
			case <-clk.WaitForTimers(1):
			case err := <-done:
				t.Fatalf("Wait returned %v while its context was live", err)
			}
		}
		for range 4 {
			backingOff()
			clk.Advance(5 * time.Second)
		}
		backingOff()
		cancel()
		checkWaitError(t, <-done, "run-1", context.Canceled, 5)
	})
	t.Run("real clock, deadline", func(t *testing.T) {
		t.Parallel()
		c := &client.Client{BaseURL: "http://" + addr}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.Wait(ctx, "run-2")
		if d := time.Since(start); d < 900*time.Millisecond {
			t.Errorf("Wait gave up after %s, before its deadline", d)
		}
		checkWaitError(t, err, "run-2", context.DeadlineExceeded, 2)
	})
}

func checkWaitError(t *testing.T, err error, runID string, stop error, minFailures int) {
	t.Helper()
	var we *client.WaitError
	if !errors.As(err, &we) {
		t.Fatalf("err = %v (%T), want a *WaitError", err, err)
	}
	var oe *net.OpError
	if we.RunID != runID || we.Failures < minFailures || !errors.Is(err, stop) || !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("WaitError %+v: want run %s, at least %d failures, matching %v and a dial *net.OpError", we, runID, minFailures, stop)
	}
	if !strings.Contains(err.Error(), runID) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("message %q does not say which run and why", err)
	}
}
