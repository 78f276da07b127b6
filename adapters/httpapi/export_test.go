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

// Patterns are the server's routes, "METHOD /path" (the tenant attack test
// covers each).
func (s *Server) Patterns() []string { return s.patterns }
