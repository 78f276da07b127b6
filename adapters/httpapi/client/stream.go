package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/sse"
	"github.com/runconveyor/conveyor/lifecycle"
)

// pollInterval is how often Wait reads a run's status when the event
// stream is not available (docs/spec.md#polling: 5 s).
const pollInterval = 5 * time.Second

// ErrStreamEnded: the server closed the event stream.
var ErrStreamEnded = errors.New("httpapi: event stream ended")

// Event is one event of GET /events/stream (docs/http-api.md): its id (the
// audit event's: resume after it with Events' lastEventID), its type (e.g.
// "run.status.changed", the types of docs/http-api.md) and its JSON data;
// its Payload method decodes the data.
type Event = sse.Event

// runEvent holds the fields of a run event's data that Wait reads.
type runEvent struct {
	RunID  string `json:"runId"`
	Status string `json:"status"`
}

// Events follows GET /events/stream, resuming after lastEventID when set and
// keeping only runID's events when set. The sequence ends after an error:
// an *Error when the server refused the stream (503 SERVICE_UNAVAILABLE when
// it serves none), ErrStreamEnded when the server closed it, ctx's error
// when ctx ended, an error for a line over 64 KiB or an event over 1 MiB.
func (c *Client) Events(ctx context.Context, lastEventID, runID string) iter.Seq2[Event, error] {
	k := connOf(c)
	return func(yield func(Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		body, err := k.openStream(ctx, lastEventID, runID)
		if err != nil {
			yield(Event{}, err)
			return
		}
		defer body.Close()
		for ev, err := range readEvents(body) {
			if err != nil && ctx.Err() != nil {
				err = ctx.Err()
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// openStream opens the event stream; a refusal is an *Error.
func (k conn) openStream(ctx context.Context, lastEventID, runID string) (io.ReadCloser, error) {
	q := url.Values{}
	if runID != "" {
		q.Set("run", runID)
	}
	req, err := k.newRequest(ctx, http.MethodGet, "/events/stream", q, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, decodeError(resp.StatusCode, data)
	}
	return resp.Body, nil
}

// readEvents parses the stream with the feed's own reader
// (sse.Read) and ends with ErrStreamEnded when the server closes it.
func readEvents(r io.Reader) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for ev, err := range sse.Read(r) {
			if !yield(ev, err) || err != nil {
				return
			}
		}
		yield(Event{}, ErrStreamEnded)
	}
}

// Wait returns the run's status once it is terminal. It follows the event
// stream, re-reading the status at each event of the run; when the stream
// is unavailable or breaks it polls GET /runs/{runId}/status every
// 5 s on c.Clock instead. Network errors (a server down or restarting:
// connection refused, reset) and 5xx answers are waited out: the first
// read is retried with backoff on c.Clock (from 250 ms, doubling, at most
// 5 s apart, with ±20 % jitter), later ones at each poll. It returns an *Error when a read of the status is
// refused (an unknown run, a 4xx), and a *WaitError when ctx ends first.
func (c *Client) Wait(ctx context.Context, runID string) (lifecycle.RunStatus, error) {
	k := connOf(c)
	w := &waiter{k: k, runID: runID, start: k.clock.Now()}
	st, err := w.first(ctx)
	if err != nil || terminal(st) {
		return st, err
	}
	st, done, err := w.follow(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return lifecycle.RunStatus{}, w.giveUp(ctx)
	case done || err != nil:
		return st, err
	}
	return w.poll(ctx)
}

// backOff is the schedule of Wait's retries of its first read of the
// status: from 250 ms, doubling, at most pollInterval apart, with ±20 %
// jitter and no limit of its own: Wait's context is the limit.
type backOff struct{ current time.Duration }

func (b *backOff) next() time.Duration {
	if b.current == 0 {
		b.current = 250 * time.Millisecond
	}
	d := float64(b.current)
	next := time.Duration(d*0.8 + rand.Float64()*(d*0.4+1))
	b.current = min(2*b.current, pollInterval)
	return next
}

// WaitError is Wait's error when its context ends before the run is
// terminal. It names the run and, when the last read of the status failed
// (the server unreachable, or answering 5xx), that failure; it matches the
// context's error and the failure (errors.Is, errors.As: a *net.OpError of
// a refused dial, an *Error of a 5xx).
type WaitError struct {
	RunID string
	// Failures counts the reads of the status that failed in a row before
	// Wait gave up (0: the server answered, the run was not done).
	Failures int
	// Waited is how long Wait waited, on the Client's clock.
	Waited time.Duration
	// Last is the last failed read's error; nil when the last read
	// answered.
	Last error
	// Stop is the context's error.
	Stop error
}

func (e *WaitError) Error() string {
	if e.Last == nil {
		return fmt.Sprintf("httpapi: waiting for run %s: %v after %s; the run is not terminal", e.RunID, e.Stop, e.Waited)
	}
	return fmt.Sprintf("httpapi: waiting for run %s: %v after %s; its status could not be read (%d failures in a row, the last: %v)",
		e.RunID, e.Stop, e.Waited, e.Failures, e.Last)
}

// Unwrap returns the context's error and the last failure.
func (e *WaitError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Stop, e.Last} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// waiter is one Wait: its run, and the failures of its reads in a row.
type waiter struct {
	k        conn
	runID    string
	start    time.Time
	failures int
	last     error
}

// read reads the status once, remembering a failure that is not the
// context's own.
func (w *waiter) read(ctx context.Context) (lifecycle.RunStatus, error) {
	st, err := w.status(ctx)
	switch {
	case err == nil:
		w.failures, w.last = 0, nil
	case ctx.Err() == nil:
		w.failures, w.last = w.failures+1, err
	}
	return st, err
}

// first reads the status until a read answers, retrying failures that may
// pass (retryable) with backOff.
func (w *waiter) first(ctx context.Context) (lifecycle.RunStatus, error) {
	var bo backOff
	clk := w.k.clock
	for {
		st, err := w.read(ctx)
		switch {
		case ctx.Err() != nil:
			return lifecycle.RunStatus{}, w.giveUp(ctx)
		case err == nil || !retryable(err):
			return st, err
		}
		t := clk.NewTimer(bo.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return lifecycle.RunStatus{}, w.giveUp(ctx)
		case <-t.C():
		}
	}
}

func (w *waiter) giveUp(ctx context.Context) error {
	return &WaitError{RunID: w.runID, Failures: w.failures, Waited: w.k.clock.Now().Sub(w.start), Last: w.last, Stop: ctx.Err()}
}

// follow waits on the event stream: done when the run is terminal; not done
// (and no error) when the stream is unavailable or broke. While the stream
// is open the status is still read every pollInterval: an event can be
// lost for good (a writer that died between its write and its audit
// object), and the status, not the stream, is the truth.
func (w *waiter) follow(parent context.Context) (lifecycle.RunStatus, bool, error) {
	ctx, cancel := context.WithCancel(parent)
	runID := w.runID
	body, err := w.k.openStream(ctx, "", runID)
	if err != nil {
		cancel()
		return lifecycle.RunStatus{}, false, parent.Err()
	}
	defer body.Close()
	type result struct {
		st  lifecycle.RunStatus
		err error
	}
	found := make(chan result, 1)
	reread := make(chan struct{})
	go func() {
		defer close(reread)
		clk := w.k.clock
		for {
			t := clk.NewTimer(pollInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			st, err := w.status(ctx)
			if ctx.Err() != nil {
				return
			}
			if (err == nil && terminal(st)) || (err != nil && !retryable(err)) {
				found <- result{st, err}
				cancel() // ends the stream's read below
				return
			}
		}
	}()
	defer func() { cancel(); <-reread }()
	// notDone is the answer when the stream broke or was cut, unless the
	// re-read (which cuts it) found the end meanwhile.
	notDone := func() (lifecycle.RunStatus, bool, error) {
		select {
		case r := <-found:
			return r.st, true, r.err
		default:
			return lifecycle.RunStatus{}, false, parent.Err()
		}
	}
	// Read once more now that the stream is open: a change made before it
	// opened has no event on it.
	st, err := w.status(ctx)
	switch {
	case err != nil && retryable(err):
		return notDone()
	case err != nil:
		return st, true, err
	case terminal(st):
		return st, true, nil
	}
	for ev, err := range readEvents(body) {
		if err != nil {
			break
		}
		var re runEvent
		if json.Unmarshal(ev.Data, &re) != nil || re.RunID != runID {
			continue
		}
		st, err := w.status(ctx)
		if err != nil && !retryable(err) && ctx.Err() == nil {
			return st, true, err
		}
		if err == nil && terminal(st) {
			return st, true, nil
		}
	}
	return notDone()
}

// status reads the run's status once.
func (w *waiter) status(ctx context.Context) (lifecycle.RunStatus, error) {
	return get[lifecycle.RunStatus](ctx, w.k, http.MethodGet, runPath(w.runID, "/status"), nil)
}

// poll reads the status every pollInterval until it is terminal.
func (w *waiter) poll(ctx context.Context) (lifecycle.RunStatus, error) {
	clk := w.k.clock
	for {
		t := clk.NewTimer(pollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return lifecycle.RunStatus{}, w.giveUp(ctx)
		case <-t.C():
		}
		st, err := w.read(ctx)
		switch {
		case err == nil && terminal(st):
			return st, nil
		case err != nil && ctx.Err() != nil:
			return lifecycle.RunStatus{}, w.giveUp(ctx)
		case err != nil && !retryable(err):
			return st, err
		}
	}
}

// retryable tells whether a failed read may succeed later: a network error
// or a 5xx, not a refusal.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500
	}
	return true
}

// terminal tells whether a run's status is a terminal state of its machine
// (the status's machine field; the canonical machine when it is empty). A
// machine this SDK does not know (a newer server's) counts the states that
// are terminal in any run machine.
func terminal(st lifecycle.RunStatus) bool {
	switch st.Machine {
	case "", lifecycle.MachineCanonical, lifecycle.MachineCancelable, lifecycle.MachineApproval:
		return lifecycle.RunFinished(st.Machine, st.Status)
	}
	return lifecycle.RunFinished(lifecycle.MachineCanonical, st.Status) ||
		lifecycle.RunFinished(lifecycle.MachineCancelable, st.Status) ||
		lifecycle.RunFinished(lifecycle.MachineApproval, st.Status)
}

// inboxPollInterval is how often WatchInbox reads the inbox stats when the
// event stream is not available (docs/spec.md#polling: 30 s).
const inboxPollInterval = 30 * time.Second

// WatchInbox yields the inbox stats now, and again whenever they change:
// at each inbox event of the stream, or, while the stream is unavailable
// or broken, at reads every 30 s on c.Clock (trying the stream
// again after each). It ends when ctx ends or a read is refused (an *Error
// under 500, yielded); 5xx answers and network errors are waited out.
func (c *Client) WatchInbox(ctx context.Context) iter.Seq2[lifecycle.InboxStats, error] {
	k := connOf(c)
	return func(yield func(lifecycle.InboxStats, error) bool) {
		var last lifecycle.InboxStats
		first := true
		// read yields the stats if they changed; false ends the watch.
		read := func() bool {
			st, err := get[lifecycle.InboxStats](ctx, k, http.MethodGet, "/inbox/stats", nil)
			switch {
			case err != nil && ctx.Err() != nil:
				return false
			case err != nil && !retryable(err):
				yield(lifecycle.InboxStats{}, err)
				return false
			case err != nil:
				return true
			case first || st != last:
				first, last = false, st
				return yield(st, nil)
			}
			return true
		}
		for ctx.Err() == nil {
			if body, err := k.openStream(ctx, "", ""); err == nil {
				ok := read() // changes before the stream opened have no event on it
				for ev, err := range readEvents(body) {
					if !ok || err != nil {
						break
					}
					if strings.HasPrefix(ev.Type, "inbox.") {
						ok = read()
					}
				}
				body.Close()
				if !ok {
					return
				}
			} else if !read() {
				return
			}
			t := k.clock.NewTimer(inboxPollInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
	}
}
