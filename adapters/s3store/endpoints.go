package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/runconveyor/conveyor/storage"
)

// How the store meets servers that stop, stall or answer for another
// (see Config.Endpoints and Config.AttemptTimeout): through the SDK's own
// hooks, not a client of its own. An endpoint resolver picks a healthy
// endpoint for every attempt (the SDK resolves the endpoint inside its
// retry loop, before signing); a middleware inside the retry loop bounds
// each attempt and marks the endpoint of a failed one down for a while;
// the retryer also retries 499 and retries at once while another endpoint
// is up.

const (
	// defaultAttemptTimeout bounds one attempt of a request (from sending
	// it to its response's headers) when Config.AttemptTimeout is 0.
	defaultAttemptTimeout = 10 * time.Second
	// defaultEndpointCooldown is how long an endpoint that failed is
	// skipped when Config.EndpointCooldown is 0.
	defaultEndpointCooldown = 5 * time.Second
)

// statusClientClosed is the status MinIO answers (ClientDisconnected) when
// it drops a request, as a stopping node does: the request may or may not
// have been carried out.
const statusClientClosed = 499

// endpoint is one S3 API URL and until when it is skipped.
type endpoint struct {
	url       string
	downUntil atomic.Int64 // unix nanoseconds; 0 when up
}

// pool is the endpoints of one store, tried in turn.
type pool struct {
	eps      []*endpoint
	next     atomic.Uint64
	cooldown time.Duration
	log      *slog.Logger
}

func newPool(urls []string, cooldown time.Duration, log *slog.Logger) *pool {
	p := &pool{cooldown: cooldown, log: log}
	for _, u := range urls {
		p.eps = append(p.eps, &endpoint{url: u})
	}
	return p
}

// pick is the next endpoint that is up, in turn; when all are down, the
// one that comes back first (a probe: the request itself tells).
func (p *pool) pick() *endpoint {
	now := time.Now().UnixNano()
	start := p.next.Add(1)
	var best *endpoint
	for i := range uint64(len(p.eps)) {
		e := p.eps[(start+i)%uint64(len(p.eps))]
		until := e.downUntil.Load()
		if until <= now {
			return e
		}
		if best == nil || until < best.downUntil.Load() {
			best = e
		}
	}
	return best
}

// pickOther is pick, passing over the endpoints a read has already asked
// (as.done): one that is up first, else one skipped for a while (a node
// that just rejoined makes the others answer 503 for a moment, and a
// not-found asked again of the node that gave it proves nothing: an
// error from the other is the truer answer); only when every endpoint was
// asked, pick's choice.
func (p *pool) pickOther(as *asked) *endpoint {
	now := time.Now().UnixNano()
	start := p.next.Add(1)
	as.mu.Lock()
	defer as.mu.Unlock()
	var skipped *endpoint
	for i := range uint64(len(p.eps)) {
		e := p.eps[(start+i)%uint64(len(p.eps))]
		switch {
		case as.done[e]:
		case e.downUntil.Load() <= now:
			as.current = e
			return e
		case skipped == nil:
			skipped = e
		}
	}
	e := skipped
	if e == nil {
		e = p.pick()
	}
	as.current = e
	return e
}

// asked is the endpoints a read has had a not-found from, and the one it
// is asking now; carried in the read's context (askedKey).
type asked struct {
	mu      sync.Mutex
	done    map[*endpoint]bool
	current *endpoint
}

type askedKey struct{}

// answeredNotFound records that the endpoint asked last said not found.
func (as *asked) answeredNotFound() {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.current != nil {
		as.done[as.current] = true
	}
}

// up reports whether some endpoint is not skipped.
func (p *pool) up() bool {
	now := time.Now().UnixNano()
	for _, e := range p.eps {
		if e.downUntil.Load() <= now {
			return true
		}
	}
	return false
}

func (p *pool) fail(ctx context.Context, e *endpoint, err error) {
	if e.downUntil.Swap(time.Now().Add(p.cooldown).UnixNano()) == 0 && p.log != nil {
		p.log.LogAttrs(ctx, slog.LevelWarn, "s3_endpoint_down", slog.String("endpoint", e.url),
			slog.Duration("skipped_for", p.cooldown), slog.String("error", err.Error()))
	}
}

func (p *pool) ok(ctx context.Context, e *endpoint) {
	if e.downUntil.Swap(0) != 0 && p.log != nil {
		p.log.LogAttrs(ctx, slog.LevelInfo, "s3_endpoint_up", slog.String("endpoint", e.url))
	}
}

// urls is every endpoint's URL, in the configured order.
func (p *pool) urls() []string {
	out := make([]string, len(p.eps))
	for i, e := range p.eps {
		out[i] = e.url
	}
	return out
}

// parseEndpoints is Endpoint (comma-separated) followed by Endpoints,
// trimmed, without repeats; each must be an http(s) URL.
func parseEndpoints(single string, list []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, raw := range append(strings.Split(single, ","), list...) {
		u := strings.TrimRight(strings.TrimSpace(raw), "/")
		if u == "" || seen[u] {
			continue
		}
		if err := checkURL(u, ""); err != nil {
			return nil, err
		}
		seen[u] = true
		out = append(out, u)
	}
	return out, nil
}

// checkURL says what is wrong with an endpoint that is not an http(s) URL
// (from names where it came from, when not the caller's own setting): most
// often it is host:port, written without its scheme.
func checkURL(u, from string) error {
	if from != "" {
		from = " (" + from + ")"
	}
	if !strings.Contains(u, "://") {
		return fmt.Errorf("s3store: endpoint %q%s has no scheme: write it as http://%s (or https:// for TLS)", u, from, u)
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return fmt.Errorf("s3store: endpoint %q%s is not an http(s) URL, e.g. http://127.0.0.1:9000", u, from)
	}
	return nil
}

// attemptKey carries an attempt's *attempt from the guard to the resolver.
type attemptKey struct{}

type attempt struct{ ep *endpoint }

// resolver resolves every attempt's endpoint to the pool's pick.
type resolver struct {
	pool  *pool
	inner s3.EndpointResolverV2
}

func (r *resolver) ResolveEndpoint(ctx context.Context, params s3.EndpointParameters) (smithyendpoints.Endpoint, error) {
	var e *endpoint
	if as, ok := ctx.Value(askedKey{}).(*asked); ok {
		e = r.pool.pickOther(as)
	} else {
		e = r.pool.pick()
	}
	if a, ok := ctx.Value(attemptKey{}).(*attempt); ok {
		a.ep = e
	}
	params.Endpoint = aws.String(e.url)
	return r.inner.ResolveEndpoint(ctx, params)
}

// errAttemptTimeout is the cause of an attempt's context the guard ended.
var errAttemptTimeout = errors.New("s3store: attempt timeout")

// attemptTimeoutError is an attempt that had no answer within the attempt
// timeout. It does not unwrap to a context error, which the SDK would
// take for the caller's and not retry.
type attemptTimeoutError struct {
	after time.Duration
	err   error
}

func (e *attemptTimeoutError) Error() string {
	return fmt.Sprintf("no answer within %s (attempt timeout): %v", e.after, e.err)
}
func (e *attemptTimeoutError) RetryableError() bool { return true }
func (e *attemptTimeoutError) Timeout() bool        { return true }

// guard runs around every attempt (a Finalize middleware inside the retry
// loop): it bounds the attempt by timeout and tells the pool how the
// attempt's endpoint did.
type guard struct {
	pool    *pool // nil: the SDK's own endpoint
	timeout time.Duration
}

func (g *guard) ID() string { return "ConveyorAttemptGuard" }

func (g *guard) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	a := &attempt{}
	base, timeout, detached := ctx, g.timeout, false
	if isWrite(in) {
		// A write, once sent, is carried to its answer (within the attempt
		// timeout) even if the caller's context ends meanwhile: MinIO can
		// lose an object whose conditional overwrite is cut mid-request
		// (it then reads 404 on every node), and the answer tells the
		// caller what became of its write. Once the context has ended,
		// no write is sent.
		if err := ctx.Err(); err != nil {
			return middleware.FinalizeOutput{}, middleware.Metadata{}, &notSentError{err: err}
		}
		base, detached = context.WithoutCancel(ctx), true
		if timeout <= 0 {
			timeout = defaultAttemptTimeout
		}
	}
	actx := context.WithValue(base, attemptKey{}, a)
	var cancel context.CancelCauseFunc
	var timer *time.Timer
	if timeout > 0 {
		actx, cancel = context.WithCancelCause(actx)
		timer = time.AfterFunc(timeout, func() { cancel(errAttemptTimeout) })
	}
	out, md, err := next.HandleFinalize(actx, in)
	if timer != nil {
		timer.Stop()
		if err != nil && errors.Is(context.Cause(actx), errAttemptTimeout) && (ctx.Err() == nil || detached) {
			err = &attemptTimeoutError{after: timeout, err: err}
		}
		// A body still to be read (GetObject's) keeps the attempt's
		// context until it is closed; the timeout bounded the wait for
		// its headers.
		if get, ok := out.Result.(*s3.GetObjectOutput); ok && err == nil && get.Body != nil {
			get.Body = &closeCancels{ReadCloser: get.Body, cancel: cancel}
		} else {
			cancel(nil)
		}
	}
	if g.pool != nil && a.ep != nil && (ctx.Err() == nil || detached) {
		if endpointFailure(err) {
			g.pool.fail(ctx, a.ep, err)
		} else {
			g.pool.ok(ctx, a.ep)
		}
	}
	return out, md, err
}

// isWrite reports whether the attempt's request changes the bucket (a
// PUT, POST or DELETE).
func isWrite(in middleware.FinalizeInput) bool {
	req, ok := in.Request.(*smithyhttp.Request)
	if !ok {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		return false
	}
	return true
}

// notSentError is a write not sent because the caller's context had
// ended: it cannot have been carried out.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return "not sent: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

type closeCancels struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (c *closeCancels) Close() error {
	err := c.ReadCloser.Close()
	c.cancel(nil)
	return err
}

// endpointFailure reports whether err is the endpoint's trouble rather than
// an answer about the request: no answer at all, a 5xx or a 499.
func endpointFailure(err error) bool {
	if err == nil {
		return false
	}
	switch code := httpStatus(err); {
	case code == 0:
		return noAnswer(err)
	case code >= 500, code == statusClientClosed:
		return true
	}
	return false
}

// noAnswer reports whether err, with no HTTP status, is the request
// getting no answer (a failed send or read, an attempt timeout) rather than
// one refused on this side before it went out (missing credentials, a
// signing failure), which no other endpoint and no retry mends.
func noAnswer(err error) bool {
	var send *smithyhttp.RequestSendError
	var timeout *attemptTimeoutError
	var nerr net.Error
	return errors.As(err, &send) || errors.As(err, &timeout) || errors.As(err, &nerr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// ambiguous reports whether a failed attempt of a write may have been
// carried out: it may have reached the server (no answer, an attempt
// timeout, a 499) and was not refused before being sent (a refused or
// failed dial never reached it).
func ambiguous(err error) bool {
	var ns *notSentError
	if err == nil || errors.As(err, &ns) {
		return false
	}
	switch httpStatus(err) {
	case 0:
		if !noAnswer(err) {
			return false // refused before it was sent (credentials, signing)
		}
	case statusClientClosed:
		return true
	default:
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return true
}

// retryer is the SDK's standard retryer, also retrying 499 and attempt
// timeouts, with no retry quota (an outage must not use up the right to
// retry once it is over), and without delay while another endpoint is up.
type retryer struct {
	aws.RetryerV2
	pool *pool
}

func newRetryer(maxAttempts int, p *pool) aws.Retryer {
	std := retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = maxAttempts
		o.MaxBackoff = 2 * time.Second // longer waits are the caller's (storage.Store.Patient's) to make
		o.RateLimiter = ratelimit.None
		o.Retryables = append(o.Retryables, retry.RetryableHTTPStatusCode{Codes: map[int]struct{}{statusClientClosed: {}}})
	})
	return &retryer{RetryerV2: std, pool: p}
}

func (r *retryer) RetryDelay(attempt int, err error) (time.Duration, error) {
	if r.pool != nil && len(r.pool.eps) > 1 && endpointFailure(err) && r.pool.up() {
		return 0, nil
	}
	return r.RetryerV2.RetryDelay(attempt, err)
}

// callState counts one call's attempts and notes whether one of them may
// have been carried out without an answer saying so. As a middleware
// right after the retry loop it runs once per attempt.
type callState struct {
	n         atomic.Int32
	ambiguous atomic.Bool
}

func (c *callState) ID() string { return "ConveyorCallState" }

func (c *callState) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	c.n.Add(1)
	out, md, err := next.HandleFinalize(ctx, in)
	if ambiguous(err) {
		c.ambiguous.Store(true)
	}
	return out, md, err
}

func (c *callState) option(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Finalize.Insert(c, "Retry", middleware.After)
	})
}

// unknownOutcome is a conditional write that may or may not have been
// carried out. It matches storage.ErrOutcomeUnknown, and is transient
// (storage.Transient) when its cause is, so a patient caller retries it,
// and a retry that then finds the condition broken is itself reported as
// an unknown outcome (storage.Store.Patient), never as a conflict.
type unknownOutcome struct{ err error }

func (e *unknownOutcome) Error() string   { return "outcome unknown: " + e.err.Error() }
func (e *unknownOutcome) Unwrap() error   { return e.err }
func (e *unknownOutcome) Is(t error) bool { return t == storage.ErrOutcomeUnknown }

// httpDoer is what the SDK sends requests with.
type httpDoer interface {
	Do(*http.Request) (*http.Response, error)
}
