package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestStalledBodiesUnderLowDescriptorLimit is issue 18's attack on a Worker
// process limited to 400 descriptors: 500 connections from one address
// announce a body, send a few bytes of it and stall, without a token; 300
// more from another address do the same with a valid token (the server
// waits for those bodies). The old Worker answered none of them, ran out
// of descriptors (accept4: too many open files; the store failed with
// EMFILE) and authenticated submits timed out. Now each tokenless one is
// answered and closed at once, at most -max-conns-per-addr of the others
// are held, and a client from a third address submits and waits for a run
// as usual.
func TestStalledBodiesUnderLowDescriptorLimit(t *testing.T) {
	t.Parallel()
	w := start(t, "worker", []string{nofileEnv + "=400", httpapi.TokensEnv + "=tok-gw=gateway"},
		"-addr", "127.0.0.1:0", "-data", t.TempDir(), "-step-pause", "20ms", "-poll", "50ms", "-drain", "5s")
	var addr string
	select {
	case addr = <-w.addr:
	case err := <-w.done:
		t.Fatalf("worker exited: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not start in 60 s")
	}
	stall := func(from, token string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil // refused: the listener's backlog is full, which is no hold either
		}
		t.Cleanup(func() { _ = c.Close() })
		head := "POST /agents/run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
		if token != "" {
			head += "Authorization: Bearer " + token + "\r\n"
		}
		_, _ = io.WriteString(c, head+"\r\n"+`{"agent_sl`)
		return c
	}
	var tokenless []net.Conn
	for range 500 {
		if c := stall("127.0.0.2", ""); c != nil {
			tokenless = append(tokenless, c)
		}
	}
	for range 300 {
		stall("127.0.0.3", "tok-gw")
	}

	// An authenticated client from 127.0.0.1 is served as usual.
	c := &client.Client{BaseURL: "http://" + addr, Token: "tok-gw", HTTP: &http.Client{Timeout: 5 * time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: AgentResearch})
	if err != nil {
		t.Fatalf("authenticated submit under attack: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("authenticated submit took %s", d)
	}
	if st, err := c.Wait(ctx, res.RunID); err != nil || st.Status != "completed" {
		t.Fatalf("Wait: %+v, %v", st, err)
	}

	// Every tokenless one was answered (or closed) at once, not held.
	deadline := time.Now().Add(5 * time.Second)
	held := 0
	for _, conn := range tokenless {
		_ = conn.SetReadDeadline(deadline)
		_, err := io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			held++
		}
	}
	if held > 0 {
		t.Errorf("%d of %d stalled bodies without a token are still held", held, len(tokenless))
	}
}
