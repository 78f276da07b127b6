package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/lifecycle"
)

// serveLimited serves the rig's handler as the Worker does: an http.Server
// and a listener from lim, on 127.0.0.1.
func serveLimited(t *testing.T, g *rig, lim httpapi.Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := lim.HTTPServer(g.srv.Config.Handler)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lim.Listener(ln))
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// stall opens a connection from the loopback address from, sends a
// request's headers announcing a 1000-byte body and a few bytes of it, and
// stops there.
func stall(t *testing.T, from, addr, method, path, token string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	head := method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
	if token != "" {
		head += "Authorization: Bearer " + token + "\r\n"
	}
	// A write to a connection the server closed at once may fail: that is
	// an answer too (outcome reads it).
	_, _ = io.WriteString(c, head+"\r\n"+`{"agent_sl`)
	return c
}

// outcome is what became of a stalled connection by deadline: answered
// (its status, and the connection closed after it), closed without an
// answer, or still held.
func outcome(c net.Conn, deadline time.Time) string {
	_ = c.SetReadDeadline(deadline)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "held"
	case err != nil:
		return "closed"
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	// The answer must end the connection, not wait for the rest of the
	// body.
	if _, err := br.ReadByte(); errors.As(err, &ne) && ne.Timeout() {
		return fmt.Sprintf("%d, then held", resp.StatusCode)
	}
	return fmt.Sprintf("%d, closed=%v", resp.StatusCode, resp.Close)
}

// TestStalledBodies opens 500 connections that announce a body and stall
// it, with no token, on routes of every kind (issue 18 defect 1: net/http
// read the unread body before it wrote the 401, so none was ever answered,
// and 420 of them used every descriptor of a process limited to 400). Each
// is answered at once and its connection closed; then stalled bodies with a
// valid token, which the server waits for up to BodyTimeout, are held at
// most MaxConnsPerAddr at a time from one address. Authenticated requests
// from another address are answered at once throughout.
func TestStalledBodies(t *testing.T) {
	t.Parallel()
	const perAddr = 32
	lim := httpapi.Limits{MaxConnsPerAddr: perAddr}
	g := newRig(t, rigOpts{limits: lim})
	addr := serveLimited(t, g, lim)
	cl := &client.Client{BaseURL: "http://" + addr, Token: "tok-gateway", HTTP: &http.Client{Timeout: 2 * time.Second}}
	served := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := cl.Agents(ctx); err != nil {
			t.Fatalf("%s: GET /agents: %v", when, err)
		}
		if _, err := cl.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "quick"}); err != nil {
			t.Fatalf("%s: POST /agents/run: %v", when, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: authenticated requests took %s", when, d)
		}
	}

	routes := []struct{ method, path string }{
		{"POST", "/agents/run"}, {"POST", "/runs/run-x/cancel"}, {"GET", "/runs/run-x/status"},
		{"POST", "/webhooks/github"}, {"POST", "/jobs"}, {"GET", "/healthz"}, {"POST", "/nope"},
	}
	var conns []net.Conn
	for i := range 500 {
		rt := routes[i%len(routes)]
		conns = append(conns, stall(t, "127.0.0.2", addr, rt.method, rt.path, ""))
	}
	served("500 stalled bodies without a token")
	deadline := time.Now().Add(5 * time.Second)
	counts := map[string]int{}
	for _, c := range conns {
		counts[outcome(c, deadline)]++
	}
	for o, n := range counts {
		if strings.Contains(o, "held") {
			t.Errorf("%d of 500 stalled bodies without a token: %s", n, o)
		}
	}
	t.Logf("without a token: %v", counts)

	// With a valid token the server waits for the body (up to
	// BodyTimeout, 30 s here): one address holds at most perAddr.
	var held []net.Conn
	for range 200 {
		held = append(held, stall(t, "127.0.0.3", addr, "POST", "/agents/run", "tok-gateway"))
	}
	served("200 stalled bodies with a token")
	deadline = time.Now().Add(2 * time.Second)
	var mu sync.Mutex
	counts = map[string]int{}
	var wg sync.WaitGroup
	for _, c := range held {
		wg.Go(func() {
			o := outcome(c, deadline)
			mu.Lock()
			counts[o]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if counts["held"] > perAddr || counts["closed"] < 200-perAddr {
		t.Errorf("stalled bodies with a token: %v, want at most %d held and the rest closed", counts, perAddr)
	}
	t.Logf("with a token: %v", counts)
}

// TestLimitsDefaults: the zero Limits serve the documented defaults.
func TestLimitsDefaults(t *testing.T) {
	t.Parallel()
	srv := httpapi.Limits{}.HTTPServer(http.NotFoundHandler())
	if srv.ReadHeaderTimeout != httpapi.DefaultReadHeaderTimeout || srv.IdleTimeout != httpapi.DefaultIdleTimeout ||
		srv.MaxHeaderBytes != httpapi.DefaultMaxHeaderBytes || srv.ReadTimeout != 0 || srv.WriteTimeout != 0 {
		t.Errorf("server %+v", srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if (httpapi.Limits{MaxConnsPerAddr: -1}).Listener(ln) != ln {
		t.Error("a negative MaxConnsPerAddr still bounds")
	}
}
