package httpapi

import "net/http"

// NewWithStream is New serving stream at GET /events/stream: a test's own
// feed, with its own intervals and buffers.
func NewWithStream(cfg Config, stream http.Handler) (*Server, error) { return newServer(cfg, stream) }

// The defaults the tests compare with.
const (
	DefaultReadHeaderTimeout = defaultReadHeaderTimeout
	DefaultIdleTimeout       = defaultIdleTimeout
	DefaultMaxHeaderBytes    = defaultMaxHeaderBytes
)

// ParseTokens parses the environment form of the tokens (TokensEnv).
var ParseTokens = parseTokens

// Routes lists the route table: method and path pattern.
func Routes(s *Server) [][2]string {
	out := make([][2]string, len(s.table))
	for i, rt := range s.table {
		out[i] = [2]string{rt.method, rt.path}
	}
	return out
}
