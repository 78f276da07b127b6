package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
)

// Defaults of Limits (docs/http-api.md, "Server limits").
const (
	// defaultReadHeaderTimeout bounds the reading of a request's headers.
	defaultReadHeaderTimeout = 10 * time.Second
	// defaultBodyTimeout bounds the reading of a request's body.
	defaultBodyTimeout = 30 * time.Second
	// defaultIdleTimeout closes a keep-alive connection left idle.
	defaultIdleTimeout = 2 * time.Minute
	// defaultMaxHeaderBytes bounds a request's headers; a bearer token
	// and the API's few headers need a few hundred bytes.
	defaultMaxHeaderBytes = 64 << 10
	// defaultMaxConnsPerAddr bounds the open connections of one remote
	// address: far more than a client with a pool needs, far fewer than
	// the descriptors of a process.
	defaultMaxConnsPerAddr = 128
)

// Limits bound what one client can hold of the server: time to send its
// headers and its body, idle keep-alive connections, header bytes and
// connections. Every field has the documented default when left zero.
// Config.Limits gives the body deadline to the Server; HTTPServer and
// Listener apply the rest, as Mount does:
//
//	lim := httpapi.Limits{}
//	srv := lim.HTTPServer(handler)
//	err := srv.Serve(lim.Listener(ln))
type Limits struct {
	// ReadHeaderTimeout bounds the reading of a request's headers
	// (http.Server.ReadHeaderTimeout). Default 10 s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds the reading of a request's body, counted from the
	// end of its headers, and is set before anything else looks at the
	// request, authentication included: a client that stalls its body is
	// cut off then, on every route. Not a whole-request bound: the event
	// stream, a GET without a body, runs as long as it runs. Default 30 s.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle that long
	// (http.Server.IdleTimeout). Default 2 min.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (http.Server.MaxHeaderBytes);
	// longer is answered 431. Default 64 KiB.
	MaxHeaderBytes int
	// MaxConnsPerAddr bounds the connections open at once from one remote
	// IP address (Listener); one more is closed as soon as it is accepted,
	// before a byte is read. Behind a reverse proxy every client is the
	// proxy's address: raise it to the proxy's pool. Negative: no bound.
	// Default 128.
	MaxConnsPerAddr int
}

// withDefaults fills the zero fields.
func (l Limits) withDefaults() Limits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = defaultReadHeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = defaultBodyTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = defaultIdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = defaultMaxHeaderBytes
	}
	if l.MaxConnsPerAddr == 0 {
		l.MaxConnsPerAddr = defaultMaxConnsPerAddr
	}
	return l
}

// HTTPServer returns an http.Server serving h with the header, idle and
// header-size limits. It sets no ReadTimeout or WriteTimeout: they would
// cut the event stream; the body's deadline is the Server's (BodyTimeout),
// and the stream bounds each of its writes itself (Config.EventWriteTimeout),
// on a connection whose send buffer the returned server's ConnContext
// bounds.
func (l Limits) HTTPServer(h http.Handler) *http.Server {
	l = l.withDefaults()
	return &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes,
		ConnContext: events.ConnContext}
}

// Listener bounds ln's connections per remote IP address to
// MaxConnsPerAddr: one over the bound is closed as soon as it is accepted,
// so a client that opens connections and stalls them holds at most that
// many descriptors, and every other client is still served.
func (l Limits) Listener(ln net.Listener) net.Listener {
	l = l.withDefaults()
	if l.MaxConnsPerAddr < 0 {
		return ln
	}
	return &limitListener{Listener: ln, max: l.MaxConnsPerAddr, open: map[netip.Addr]int{}}
}

type limitListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[netip.Addr]int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := remoteIP(c)
		l.mu.Lock()
		if l.open[addr] >= l.max {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.open[addr]++
		l.mu.Unlock()
		return &limitConn{Conn: c, release: func() { l.release(addr) }}, nil
	}
}

func (l *limitListener) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr]--; l.open[addr] <= 0 {
		delete(l.open, addr)
	}
}

// remoteIP is a connection's remote IP address; a connection that is not
// TCP (a Unix socket) counts as the zero address, one client.
func remoteIP(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// limitConn gives its address's slot back once, at its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// NetConn returns the connection c wraps (as tls.Conn does), so the event
// stream can set its send buffer.
func (c *limitConn) NetConn() net.Conn { return c.Conn }

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// bodyGuard is the request body as the Server reads it: it remembers
// whether the body was read to its end, so that an answer written before
// then closes the connection instead of reading the rest.
type bodyGuard struct {
	body interface {
		Read([]byte) (int, error)
		Close() error
	}
	done bool
}

func (b *bodyGuard) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil {
		b.done = true
	}
	return n, err
}

func (b *bodyGuard) Close() error { return b.body.Close() }
