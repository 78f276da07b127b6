package httpapi

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TokensEnv is the environment variable the Worker reads its tokens from
// (LoadTokens), as "tok1=gateway,tok2=admin"; an actor may name its
// tenant, "tok3=gateway@acme", or every tenant, "tok4=admin@*".
const TokensEnv = "CONVEYOR_TOKENS"

// authenticate returns the request's actor: its bearer token's, or, with no
// tokens configured, its X-Conveyor-Actor header's (gateway by default) for
// a loopback client only.
func (s *Server) authenticate(r *http.Request) (lifecycle.Actor, error) {
	if len(s.cfg.Tokens) == 0 {
		// The loopback address is the credential, so nothing relayed for
		// someone else may pass: a proxy's request (it names its client), a
		// browser's for a page of another name that resolves here (DNS
		// rebinding: only the Host tells), a cross-site write (any page can
		// POST an empty body to 127.0.0.1 without a preflight).
		if !loopbackRemote(r.RemoteAddr) {
			return "", apiErr(codes.Unauthorized, "no tokens are configured: only loopback clients are served")
		}
		if !loopbackHost(r.Host) {
			return "", apiErr(codes.Unauthorized, "no tokens are configured: only requests for localhost or a loopback address are served, not Host %q", r.Host)
		}
		for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"} {
			if r.Header.Get(h) != "" {
				return "", apiErr(codes.Unauthorized, "no tokens are configured: a request relayed by a proxy (%s) is not a loopback client's", h)
			}
		}
		if err := crossOrigin.Check(r); err != nil {
			return "", apiErr(codes.Forbidden, "no tokens are configured: a cross-origin %s is refused", r.Method)
		}
		a := lifecycle.Actor(r.Header.Get(wire.ActorHeader))
		if a == "" {
			return lifecycle.ActorGateway, nil
		}
		a = normalizeActor(a)
		if !knownActor(a) {
			return "", apiErr(codes.Unauthorized, "unknown actor in %s", wire.ActorHeader)
		}
		return a, nil
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", apiErr(codes.Unauthorized, "a bearer token is required (Authorization: Bearer <token>)")
	}
	// Compare with every token in constant time, so the answer's timing
	// tells nothing about how much of a token was right.
	var actor lifecycle.Actor
	for t, a := range s.cfg.Tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(tok)) == 1 {
			actor = a
		}
	}
	if actor == "" {
		return "", apiErr(codes.Unauthorized, "unknown bearer token")
	}
	return actor, nil
}

// splitTenant splits a token's "actor@tenant" into its actor and tenant
// (docs/http-api.md#tokens-and-tenants): no "@" is the default tenant (""), "@*" every
// tenant (lifecycle.AllTenants); a tenant is one key segment.
func splitTenant(v lifecycle.Actor) (lifecycle.Actor, string, error) {
	a, tenant, scoped := strings.Cut(string(v), "@")
	if !scoped || tenant == lifecycle.AllTenants {
		return lifecycle.Actor(a), tenant, nil
	}
	if err := storekey.ValidateID("tenant", tenant); err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return lifecycle.Actor(a), tenant, nil
}

// crossOrigin refuses cross-origin writes (Sec-Fetch-Site, else Origin
// against Host); GET, HEAD and OPTIONS pass.
var crossOrigin = http.NewCrossOriginProtection()

// loopbackHost tells whether a request's Host names this machine:
// localhost or a loopback address, any port; an empty Host (HTTP/1.0, no
// browser) too.
func loopbackHost(hostport string) bool {
	if hostport == "" {
		return true
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func loopbackRemote(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// normalizeActor reads "owner" as gateway (docs/http-api.md: the owner's
// endpoints are the gateway's).
func normalizeActor(a lifecycle.Actor) lifecycle.Actor {
	if a == "owner" {
		return lifecycle.ActorGateway
	}
	return a
}

// parseTokens parses the environment form of the tokens,
// "tok1=gateway,tok2=admin" (spaces around items are ignored). Actors are
// those of the authority matrix's actors, "owner", which means gateway, and
// "guest:{zone}", a zone guest.
func parseTokens(s string) (map[string]lifecycle.Actor, error) {
	out := map[string]lifecycle.Actor{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		tok, actor, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%w: token item %d: want token=actor", ErrInvalidConfig, len(out)+1)
		}
		if err := addToken(out, strings.TrimSpace(tok), strings.TrimSpace(actor)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LoadTokens reads the Worker's tokens: the token file at path (none when
// path is empty), one "token actor" pair per line, blank lines and lines
// starting with # ignored, then TokensEnv, whose tokens are added to the
// file's. Actors are those of the authority matrix, "owner", which means
// gateway, and "guest:{zone}", a guest of that zone, who may only submit
// to the inbox (its entries' identity is "guest:{zone}"). Neither: an
// empty map.
func LoadTokens(path string) (map[string]lifecycle.Actor, error) {
	out := map[string]lifecycle.Actor{}
	if path != "" {
		if err := loadTokenFile(out, path); err != nil {
			return nil, err
		}
	}
	if env := os.Getenv(TokensEnv); env != "" {
		t, err := parseTokens(env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", TokensEnv, err)
		}
		maps.Copy(out, t)
	}
	return out, nil
}

func loadTokenFile(out map[string]lifecycle.Actor, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			// The line is not quoted: it may hold a token.
			return fmt.Errorf("%w: %s:%d: want \"token actor\"", ErrInvalidConfig, path, n)
		}
		if err := addToken(out, f[0], f[1]); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
	return sc.Err()
}

func addToken(m map[string]lifecycle.Actor, tok, value string) error {
	if tok == "" {
		return fmt.Errorf("%w: empty token", ErrInvalidConfig)
	}
	a, err := normalToken(lifecycle.Actor(value))
	if err != nil {
		return err
	}
	if _, dup := m[tok]; dup {
		return fmt.Errorf("%w: a token is given twice", ErrInvalidConfig)
	}
	m[tok] = a
	return nil
}

// normalToken is a token's "actor[@tenant]" as the Server keeps it: the
// actor normalized ("owner" is gateway), its tenant as given. An actor
// neither of the authority matrix nor a zone guest, or a tenant no key
// segment can be, is an ErrInvalidConfig.
func normalToken(v lifecycle.Actor) (lifecycle.Actor, error) {
	actor, tenant, err := splitTenant(v)
	if err != nil {
		return "", err
	}
	a := normalizeActor(actor)
	if !knownActor(a) {
		return "", fmt.Errorf("%w: unknown actor %q", ErrInvalidConfig, actor)
	}
	if tenant != "" {
		a += lifecycle.Actor("@" + tenant)
	}
	return a, nil
}

// CheckListen refuses to serve addr without tokens unless addr is a
// loopback address (127.0.0.1, ::1 or localhost): without tokens every
// request may act as any actor, which only the local machine may do.
func CheckListen(addr string, tokens map[string]lifecycle.Actor) error {
	if len(tokens) > 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: listen address %q: %v", ErrInvalidConfig, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: no tokens configured, so only a loopback address may be served, not %q (set %s or a token file)", ErrInvalidConfig, addr, TokensEnv)
}

// knownActor tells whether a names an actor a request may act as: one of
// the authority matrix's, or a zone guest.
func knownActor(a lifecycle.Actor) bool {
	_, guest := authority.GuestZone(a)
	return guest || slices.Contains(authority.Actors(), a)
}

// refusal is why rt refuses actor, nil when it admits it: a zone guest is
// admitted by the routes that admit guests only (the inbox submission),
// any other actor by the route's actors.
func refusal(rt route, actor lifecycle.Actor) error {
	if _, guest := authority.GuestZone(actor); guest {
		if rt.guest {
			return nil
		}
		return apiErr(codes.Forbidden, "a zone guest (%s) may only POST /inbox/submit, not %s %s", actor, rt.method, rt.path)
	}
	if rt.actors != nil && !slices.Contains(rt.actors, actor) {
		return apiErr(codes.Forbidden, "actor %s may not %s %s (allowed: %s)", actor, rt.method, rt.path, joinActors(rt.actors))
	}
	return nil
}
