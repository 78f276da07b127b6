//go:build linux

package httpapi_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/adapters/memstore"
)

// TestStreamSendBufferBounded: served as the Worker serves it (Limits'
// http.Server and listener), the event stream's connection gets the
// feed's send buffer, so a client that stops reading holds that much of
// the server's memory, not the 4 MiB Linux grows a buffer to, and its
// writes start to wait (and the feed's write deadline to run) once that
// much is unread. Before, the server had no ConnContext and the limited
// connection did not expose its socket: the buffer was the kernel's.
func TestStreamSendBufferBounded(t *testing.T) {
	t.Parallel()
	f, err := events.New(events.Config{Store: memstore.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	g := newRig(t, rigOpts{events: f})
	lim := httpapi.Limits{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := lim.HTTPServer(g.srv.Config.Handler)
	var mu sync.Mutex
	var conns []net.Conn
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateActive {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lim.Listener(ln))
	}()
	defer func() { _ = srv.Close(); <-done }()
	req, err := http.NewRequest("GET", "http://"+ln.Addr().String()+"/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok-frontend")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /events/stream: %s", resp.Status)
	}
	mu.Lock()
	c := conns[0]
	mu.Unlock()
	u, ok := c.(interface{ NetConn() net.Conn })
	if !ok {
		t.Fatalf("the listener's connection %T does not expose its socket", c)
	}
	rc, err := u.NetConn().(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var size int
	if cerr := rc.Control(func(fd uintptr) { size, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Linux reports twice the size set, for its bookkeeping.
	if size != 2*events.DefaultSendBuffer {
		t.Errorf("the stream's send buffer is %d bytes, want %d", size, 2*events.DefaultSendBuffer)
	}
}
