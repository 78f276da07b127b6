package httpapi_test

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// nextPath is the path and query of a page's Link rel="next", "" for none.
func nextPath(t *testing.T, h http.Header) string {
	t.Helper()
	link := h.Get("Link")
	if link == "" {
		return ""
	}
	end := strings.Index(link, ">")
	if !strings.HasPrefix(link, "<") || end < 0 {
		t.Fatalf("Link %q", link)
	}
	return link[1:end]
}

// withCursor is path with its cursor replaced by c.
func withCursor(t *testing.T, path, c string) string {
	t.Helper()
	u, err := url.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("cursor", c)
	u.RawQuery = q.Encode()
	return u.String()
}

func cursorOf(t *testing.T, path string) string {
	t.Helper()
	u, err := url.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("cursor")
}

// alter changes one character of the position c holds (a letter or digit
// of its last id, to another), keeping it a well-formed position of its
// list, and keeps the rest of c as it is.
func alter(t *testing.T, c string) string {
	t.Helper()
	pos, rest, signed := strings.Cut(c, ".")
	b, err := base64.RawURLEncoding.DecodeString(pos)
	if err != nil {
		t.Fatalf("cursor %q: %v", c, err)
	}
	end := len(b)
	if i := strings.LastIndexByte(string(b), '.'); i > 0 {
		end = i // before an extension
	}
	for i := end - 1; i >= 0; i-- {
		switch ch := b[i]; {
		case ch >= '0' && ch <= '8', ch >= 'a' && ch <= 'y':
			b[i]++
		case ch == '9', ch == 'z':
			b[i]--
		default:
			continue
		}
		out := base64.RawURLEncoding.EncodeToString(b)
		if signed {
			out += "." + rest
		}
		return out
	}
	t.Fatalf("cursor %q: no character to change", c)
	return ""
}

// unsigned is a well-formed cursor of the same position as c that no
// page handed out: the position's bytes in base64url, as a client that
// read how cursors look could make one (and as the previous release's
// cursors were).
func unsigned(t *testing.T, c string) string {
	t.Helper()
	pos, _, _ := strings.Cut(c, ".")
	b, err := base64.RawURLEncoding.DecodeString(pos)
	if err != nil || len(b) == 0 {
		t.Fatalf("cursor %q: no position in it (%v)", c, err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestCursorsAreTheServers: every paged list refuses with 400
// INVALID_CURSOR a cursor it did not hand out: one made by hand from a
// well-formed position, a real one with a character changed, and a real
// one of another list (another route, or the same route with other
// filters). Its own cursors are accepted, by this Server and by another on
// the same store (a second Worker). Before, every forged, altered or
// foreign cursor that decoded to a position was answered 200 with a page.
func TestCursorsAreTheServers(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	gw, admin := g.client(lifecycle.ActorGateway), g.client(lifecycle.ActorAdmin)
	for range 3 {
		if _, err := gw.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"}); err != nil {
			t.Fatal(err)
		}
		if _, err := gw.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "gate"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, agent := range []string{"quick", "quick", "quick", "slow", "slow", "slow"} {
		if _, err := gw.Enqueue(ctx, lifecycle.NewJob{RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: agent}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := gw.SubmitInbox(ctx, lifecycle.InboxSubmission{Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
			Intent: lifecycle.InboxIntent{Action: "research", Target: "violins"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"jobs/bad-1.json", "jobs/bad-2.json", "jobs/bad-3.json"} {
		if _, err := records.Quarantine(ctx, g.store, &lifecycle.QuarantinedError{Key: key, Data: []byte("{"), Reason: "test"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// A second Worker on the same store.
	other, err := httpapi.New(httpapi.Config{Runner: g.runner, Queue: g.queue, Inbox: g.box, Store: g.store, Tokens: tokens,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(other)
	t.Cleanup(srv2.Close)
	lists := []string{
		"/runs?limit=2", "/runs?agent=quick&limit=2", "/runs?agent=gate&limit=2",
		"/jobs?limit=2", "/jobs?agent=quick&limit=2", "/jobs?agent=slow&limit=2",
		"/inbox/entries?limit=2", "/inbox/entries?status=pending&limit=2",
		"/quarantine?limit=2",
	}
	// The second page's path of each list.
	second := map[string]string{}
	for _, l := range lists {
		status, h, body := g.raw("GET", l, "tok-admin", "", nil, nil)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", l, status, body)
		}
		if second[l] = nextPath(t, h); second[l] == "" {
			t.Fatalf("GET %s: no next page", l)
		}
	}
	type call struct{ name, path string }
	for _, l := range lists {
		t.Run(strings.TrimPrefix(l, "/"), func(t *testing.T) {
			real := cursorOf(t, second[l])
			if status, _, body := g.raw("GET", second[l], "tok-admin", "", nil, nil); status != http.StatusOK {
				t.Errorf("its own cursor: %d %s", status, body)
			}
			req, _ := http.NewRequest("GET", srv2.URL+second[l], nil)
			req.Header.Set("Authorization", "Bearer tok-admin")
			if resp, err := srv2.Client().Do(req); err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("its cursor on another Server of the store: %v %v", resp, err)
			} else {
				resp.Body.Close()
			}
			bad := []call{
				{"made by hand", withCursor(t, second[l], unsigned(t, real))},
				{"altered", withCursor(t, second[l], alter(t, real))},
			}
			for _, o := range lists {
				if o != l {
					bad = append(bad, call{"of " + o, withCursor(t, second[l], cursorOf(t, second[o]))})
				}
			}
			for _, c := range bad {
				status, _, body := g.raw("GET", c.path, "tok-admin", "", nil, nil)
				if status != http.StatusBadRequest || !strings.Contains(string(body), codes.InvalidCursor) {
					t.Errorf("a cursor %s: GET %s: %d %s, want 400 %s", c.name, c.path, status, body, codes.InvalidCursor)
				}
			}
		})
	}
	// The Go client follows the links as before.
	all, next, err := admin.Jobs(ctx, client.Query{Limit: 2, All: true})
	if err != nil || next != "" {
		t.Fatalf("Jobs(All): next %q, %v", next, err)
	}
	if n := len(all); n != 6 {
		t.Errorf("Jobs(All): %d jobs, want 6", n)
	}
}

// TestCursorKeyReplaced: a key replaced in the store (an operator deleted
// it, a Worker made a new one) is picked up by a Worker that kept the old
// one, once a cursor it refuses comes at least a minute after it read the
// key; before that, the refusal costs no store read.
func TestCursorKeyReplaced(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	for range 3 {
		if _, err := g.client(lifecycle.ActorGateway).Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"}); err != nil {
			t.Fatal(err)
		}
	}
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	serve := func() string {
		s, err := httpapi.New(httpapi.Config{Runner: g.runner, Store: g.store, Tokens: tokens, Clock: clk,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	get := func(base, path string) (int, http.Header) {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer tok-gateway")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	old := serve()
	if status, _ := get(old, "/runs?limit=1"); status != http.StatusOK {
		t.Fatalf("first page: %d", status)
	}
	if err := g.store.Delete(ctx, "system/cursor-key.json", storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	status, h := get(serve(), "/runs?limit=1") // a new Worker: a new key
	next := nextPath(t, h)
	if status != http.StatusOK || next == "" {
		t.Fatalf("new Worker's first page: %d, next %q", status, next)
	}
	if status, _ := get(old, next); status != http.StatusBadRequest {
		t.Errorf("a cursor of the new key within a minute of reading the old: %d, want 400", status)
	}
	clk.Advance(time.Minute)
	if status, _ := get(old, next); status != http.StatusOK {
		t.Errorf("a cursor of the new key a minute later: %d, want 200", status)
	}
}
