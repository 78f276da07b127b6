package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestIdempotencyKeyIsTheCallers: an API caller's key is always in its own
// api:{actor}: namespace (docs/spec.md#idempotency: the key includes the
// authenticated client id). A caller that sends a key naming another client, or another
// source's scheme, must not occupy that key: the owner of the key (another
// actor over HTTP, or the in-process scheduler or webhook handler calling
// Runner.Submit) still gets its own new run, not a conflict and not the
// caller's run.
func TestIdempotencyKeyIsTheCallers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// The gateway's header value, with input {"by":"gateway"}.
		claim string
		// The key's owner then submits input {"by":"owner"} under its key:
		// over HTTP as an actor with X-Request-ID ownerToken/ownerID, or
		// in process with ownerKey.
		ownerToken, ownerID string
		ownerKey            string
	}{
		{name: "another actor's api key", claim: "api:admin:req-1", ownerToken: "tok-admin", ownerID: "req-1"},
		{name: "the scheduler's key", claim: "scheduler:nightly:2026-01-01T00:00:00Z", ownerKey: "scheduler:nightly:2026-01-01T00:00:00Z"},
		{name: "a webhook's key", claim: "github:delivery-7", ownerKey: "github:delivery-7"},
		{name: "a slack key", claim: "slack:T1:123.456", ownerKey: "slack:T1:123.456"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, rigOpts{})
			ctx := context.Background()
			status, _, body := g.raw("POST", "/agents/run", "tok-gateway", "application/json",
				[]byte(`{"agent_slug":"quick","input":{"by":"gateway"}}`), map[string]string{"X-Idempotency-Key": tt.claim})
			if status != http.StatusCreated {
				t.Fatalf("gateway's submit: %d %s", status, body)
			}
			var claimed struct {
				RunID string `json:"run_id"`
			}
			if err := json.Unmarshal(body, &claimed); err != nil {
				t.Fatal(err)
			}
			var ownerRun string
			if tt.ownerToken != "" {
				status, _, body = g.raw("POST", "/agents/run", tt.ownerToken, "application/json",
					[]byte(`{"agent_slug":"quick","input":{"by":"owner"}}`), map[string]string{"X-Request-ID": tt.ownerID})
				if status != http.StatusCreated {
					t.Fatalf("the key's owner got %d %s, want 201 and a run of its own", status, body)
				}
				var a struct {
					RunID string `json:"run_id"`
				}
				_ = json.Unmarshal(body, &a)
				ownerRun = a.RunID
			} else {
				res, err := g.runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick", Input: json.RawMessage(`{"by":"owner"}`), IdempotencyKey: tt.ownerKey})
				if errors.Is(err, lifecycle.ErrIdempotencyConflict) || err != nil {
					t.Fatalf("the key's owner: %v, want a run of its own", err)
				}
				if res.Duplicate {
					t.Fatalf("the key's owner got the gateway's run %s as a duplicate", res.RunID)
				}
				ownerRun = res.RunID
			}
			if ownerRun == claimed.RunID {
				t.Errorf("the owner's run is the gateway's %s", ownerRun)
			}
			// The gateway's own retry is still a duplicate of its run.
			status, _, body = g.raw("POST", "/agents/run", "tok-gateway", "application/json",
				[]byte(`{"agent_slug":"quick","input":{"by":"gateway"}}`), map[string]string{"X-Idempotency-Key": tt.claim})
			if status != http.StatusOK || string(body) != `{"run_id":"`+claimed.RunID+`","duplicate":true}`+"\n" {
				t.Errorf("gateway's retry: %d %s, want its run as a duplicate", status, body)
			}
		})
	}
}

// TestTokenlessTrustsOnlyTheLocalMachine: without tokens the loopback
// address is the credential, so what a browser or a proxy on this machine
// relays for someone else must not pass for a local client:
//   - DNS rebinding: a page of evil.example whose name now resolves to
//     127.0.0.1 reads and writes as the gateway, its requests same-origin
//     for the browser; only the Host header tells them apart;
//   - cross-site requests: any page can POST an empty body (no preflight)
//     to http://127.0.0.1:8080/runs/{id}/cancel;
//   - a reverse proxy on this machine relays a remote client's request.
//
// Each is refused and writes nothing; the local forms still pass.
func TestTokenlessTrustsOnlyTheLocalMachine(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{tokens: map[string]lifecycle.Actor{}})
	ctx := context.Background()
	res, err := g.runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	port := g.srv.URL[strings.LastIndex(g.srv.URL, ":")+1:]
	cancel := "/runs/" + res.RunID + "/cancel"
	tests := []struct {
		name         string
		method, path string
		host         string
		header       map[string]string
		status       int
		code         string
	}{
		{name: "rebound name reads", method: "GET", path: "/runs?agent=slow", host: "evil.example:" + port, status: 401, code: "UNAUTHORIZED"},
		{name: "rebound name writes", method: "POST", path: cancel, host: "evil.example:" + port, status: 401, code: "UNAUTHORIZED"},
		{name: "rebound name without port", method: "GET", path: "/agents", host: "evil.example", status: 401, code: "UNAUTHORIZED"},
		{name: "cross-site POST", method: "POST", path: cancel, header: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
			status: 403, code: "FORBIDDEN"},
		{name: "cross-origin POST, old browser", method: "POST", path: cancel, header: map[string]string{"Origin": "https://evil.example"},
			status: 403, code: "FORBIDDEN"},
		{name: "proxied, X-Forwarded-For", method: "GET", path: "/agents", header: map[string]string{"X-Forwarded-For": "203.0.113.9"}, status: 401, code: "UNAUTHORIZED"},
		{name: "proxied, Forwarded", method: "POST", path: cancel, header: map[string]string{"Forwarded": "for=203.0.113.9"}, status: 401, code: "UNAUTHORIZED"},
		{name: "proxied, X-Real-IP", method: "GET", path: "/agents", header: map[string]string{"X-Real-IP": "203.0.113.9"}, status: 401, code: "UNAUTHORIZED"},

		{name: "local by IP", method: "GET", path: "/agents", status: 200},
		{name: "local by name", method: "GET", path: "/agents", host: "localhost:" + port, status: 200},
		{name: "local by name, any case", method: "GET", path: "/agents", host: "LocalHost:" + port, status: 200},
		{name: "local page GET, cross-site", method: "GET", path: "/agents", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, status: 200},
		{name: "local page POST, same-origin", method: "POST", path: "/runs/" + res.RunID + "/events", host: "localhost:" + port,
			header: map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost:" + port, "Content-Type": "application/json"},
			status: 409}, // past the gate: the machine refuses the event
	}
	before := g.snapshot()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := ""
			if strings.HasSuffix(tt.path, "/events") {
				body = `{"type":"reply"}`
			}
			req, err := http.NewRequest(tt.method, g.srv.URL+tt.path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := g.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct{ Code string }
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != tt.status || (tt.code != "" && e.Code != tt.code) {
				t.Errorf("%s %s (Host %q, %v): %d %s, want %d %s", tt.method, tt.path, tt.host, tt.header, resp.StatusCode, e.Code, tt.status, tt.code)
			}
		})
	}
	if d := diffSnapshots(before, g.snapshot()); d != "" {
		t.Errorf("the store changed:\n%s", d)
	}
}

// TestSlowBodyIsCutOff: a client that sends its headers and then a body
// slower than the request's deadline (or stops sending it) is answered
// within that deadline (Limits.BodyTimeout) and writes nothing. The deadline bounded only the
// SDK calls, not the reading of the body, so such a client held a
// handler, its goroutine and its connection for as long as it liked, and
// the Worker's Shutdown waited for it.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		head string
		body string
	}{
		{name: "content length", head: "Content-Length: 100\r\n", body: `{"agent_slug":`},
		{name: "chunked", head: "Transfer-Encoding: chunked\r\n", body: "e\r\n{\"agent_slug\":\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The deadline is a network one, in wall-clock time.
			g := newRig(t, rigOpts{limits: httpapi.Limits{BodyTimeout: 200 * time.Millisecond}})
			before := g.snapshot()
			conn, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// The test's own bound: far past the server's deadline.
			if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			req := "POST /agents/run HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok-gateway\r\nContent-Type: application/json\r\n" + tt.head + "\r\n" + tt.body
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer to a stalled body: %v", err)
			}
			defer resp.Body.Close()
			var e struct{ Code string }
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != http.StatusBadRequest || e.Code != codes.InvalidRequest {
				t.Errorf("stalled body: %d %s, want 400 INVALID_REQUEST", resp.StatusCode, e.Code)
			}
			if d := diffSnapshots(before, g.snapshot()); d != "" {
				t.Errorf("the store changed:\n%s", d)
			}
		})
	}
}
