package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/adapters/httpapi/internal/page"
	"github.com/runconveyor/conveyor/adapters/httpapi/internal/webhook"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	xmachine "github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/proposals"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// Defaults of Config.
const (
	// defaultMaxBodyBytes bounds a request body (docs/http-api.md).
	defaultMaxBodyBytes = 1 << 20
	// defaultRequestTimeout bounds the SDK calls of one request. The SDK
	// waits out transient store errors for as long as its context allows,
	// so without a deadline a request to a dead store would never answer.
	// 10 s: a client learns the store is down well before its own timeout
	// (commonly 30 s), while one stalled store attempt (the S3 adapter's
	// attempt timeout) still fits in it.
	defaultRequestTimeout = 10 * time.Second
)

// ErrInvalidConfig is matched by the errors of New and of the token parsers.
var ErrInvalidConfig = errors.New("httpapi: invalid config")

// Config configures a Server. Only Runner is required; every other field
// has the documented default when left zero.
type Config struct {
	// Runner serves the run routes. Required.
	Runner *run.Runner
	// Queue serves /jobs. Default none: those routes answer 404 NOT_FOUND
	// saying no job queue is served here.
	Queue *jobqueue.Queue
	// Inbox serves /inbox/*. Default none: 404 NOT_FOUND, as for Queue.
	Inbox *inbox.Box
	// NLM, with Runner, serves POST /nlm/callback (nlm.Sink), and the NLM
	// backend's own routes: POST /jobs/process and GET /nlm/jobs/{jobId}.
	// Default none: 404 NOT_FOUND, as for Queue.
	NLM *nlm.Processor
	// NLMBackend is an NLM backend deployed apart (the Go client's
	// NLMBackend) whose callbacks POST /nlm/callback checks and hands to
	// the Runner. Default: NLM.
	NLMBackend nlm.Backend
	// Artifacts serves GET /artifacts/{artifactId} and GET
	// /jobs/{jobId}/artifact. Default: the Queue's artifact store, else
	// the NLM processor's; with none, 404 NOT_FOUND.
	Artifacts *artifact.Store
	// Store serves /quarantine (the list of quarantined records, a restore (Store.Restore of the HTTP API))
	// and /proposals (the proposals runs created, and the gateway's
	// decisions); give the store the Runner, Queue and Inbox write to.
	// Default none: 404 NOT_FOUND, as for Queue.
	Store *storage.Store

	// CursorKey signs the cursors of the paged lists (HMAC-SHA256), so a
	// cursor no page of its list handed out is refused; at least
	// 16 bytes. Default: the key kept in Store
	// (system/cursor-key.json), created by the first Server that needs it
	// and read once by every other, so Workers sharing a store accept each
	// other's cursors; without Store, a random key of this Server's, whose
	// cursors no other Server accepts. Set it (the same on every Worker)
	// to keep the key out of the store.
	CursorKey []byte

	// Tokens maps bearer tokens to the actors they act as (LoadTokens):
	// an actor, "gateway", acts for the default tenant; "gateway@acme" for
	// tenant acme only, and "admin@*" for every tenant
	// (docs/http-api.md#tokens-and-tenants). Every read and write of a request is
	// confined to its token's tenant: another tenant's ids answer 404.
	// Default none: only loopback clients are served, as the
	// actor their X-Conveyor-Actor header names, gateway by default; the
	// Worker refuses to listen elsewhere (CheckListen).
	Tokens map[string]lifecycle.Actor

	// Schedules serves GET /schedules and an admin's pause and resume.
	// Default none: 404 NOT_FOUND, as for Queue.
	Schedules lifecycle.Schedules
	// GitHubSecret and SlackSigningSecret authenticate the webhooks of
	// their source, served at /webhooks/github and /webhooks/slack
	// (docs/http-api.md); a source without its secret is not served (404),
	// and with neither nothing is mounted at /webhooks/ (404). A webhook's
	// request carries no bearer token: its signature is checked instead.
	// GitHub's needs Store, which holds its dedupe records.
	GitHubSecret       string
	SlackSigningSecret string
	// WebhookRoutes map the sources' events to agents; an event without a
	// route is answered "started": false.
	WebhookRoutes []WebhookRoute

	// Events serves the event feed at GET /events/stream, read from Store
	// (required with it) by Run. Default none: the route answers 503
	// SERVICE_UNAVAILABLE, and the Go client falls back to polling.
	Events bool
	// EventPollInterval is how often the feed lists new audit events while
	// a client is connected; EventIdlePollInterval while none is (docs/http-api.md,
	// "Events"). Defaults 250 ms and 5 s.
	EventPollInterval, EventIdlePollInterval time.Duration
	// EventWriteTimeout bounds one write to a stream's client; a client
	// that leaves more unread than its connection buffers is disconnected
	// after it. Default 30 s.
	EventWriteTimeout time.Duration
	// Page serves the live page at /ui/ (every method), and GET / redirects
	// there. Default off: both answer 404. Its GETs, like /healthz, need no
	// token: the assets hold no data, and a browser cannot send a bearer
	// token with a navigation; the page sends the user's token with each
	// API call.
	Page bool
	// Metrics is mounted at GET /metrics, for any authenticated actor.
	// Default none: 404.
	Metrics http.Handler

	// Registerer, when set, gets the request metrics registered:
	// conveyor_http_requests_total and
	// conveyor_http_request_duration_seconds, by method, route pattern and
	// status (a client gone before the answer counts as 499). A registry
	// holding them already (another Server's) is shared. Default none. The
	// Worker gives its Config.Metrics registry, which the Client has put
	// Conveyor's own metrics and the Go and process collectors in.
	Registerer prometheus.Registerer

	// Logger receives one line per failed request: 5xx at ERROR, 4xx at
	// DEBUG, and at INFO (http_request_canceled) one whose client went
	// away before the answer. Default slog.Default().
	Logger *slog.Logger
	// Clock is the time the Server reads. Default the wall clock.
	Clock clock.Clock
	// TracerProvider receives a server span for each request that starts
	// work (POST /agents/run, POST /jobs, the webhooks), a child of the
	// caller's W3C traceparent header (docs/spec.md#tracing). Default none:
	// no spans, at no cost; the caller's trace context still reaches the
	// run or job, which keeps it.
	TracerProvider trace.TracerProvider
	// MaxBodyBytes bounds a request body; a longer one is refused with 413
	// INPUT_TOO_LARGE. Default 1 MiB.
	MaxBodyBytes int64
	// RequestTimeout bounds the SDK calls of one request (not the event
	// stream, the page or the metrics); when it runs out the answer is
	// UPSTREAM_UNAVAILABLE. Default 10 s.
	RequestTimeout time.Duration
	// Limits bound what one client can hold of the server. The Server
	// applies BodyTimeout, on every route before authentication (a body not
	// in by then is INVALID_REQUEST, or cut off); serve it with
	// Limits.HTTPServer and Limits.Listener for the others. Default the
	// zero Limits, every field its default.
	Limits Limits
	// Drain is, for Mount, how long the http.Server's Shutdown waits for
	// the requests in flight once its loop ends, before it closes them.
	// Default 15 s.
	Drain time.Duration
}

// Server serves the Worker's HTTP API. It is an http.Handler, safe for
// concurrent use.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	log     *slog.Logger
	tracer  tracing.Tracer
	metrics *httpMetrics // nil: no Registerer
	// feed serves the event stream and its Run reads the store; nil when
	// none is served.
	feed *events.Feed
	// stream is what GET /events/stream serves: the feed, or a test's own.
	stream http.Handler
	// webhooks is mounted at /webhooks/; nil when no source has a secret.
	webhooks http.Handler
	// specs holds every machine a refused move may name, by name.
	specs map[string]lifecycle.Spec
	// The routes, by what they serve.
	runs       *runRoutes
	jobs       *jobRoutes
	inbox      *inboxRoutes
	callback   *callbackRoute
	backend    *backendRoutes
	quarantine *quarantineRoutes
	schedules  *scheduleRoutes
	proposals  *proposalRoutes
	// table is the route table as mounted.
	table []route
}

// WebhookRoute maps an event of a webhook source to the agent whose run it
// starts, or whose waiting runs it resumes (Deliver).
type WebhookRoute struct {
	// Source is "github" or "slack".
	Source string `json:"source"`
	// Event is, for GitHub, the X-GitHub-Event ("pull_request"), optionally
	// with the payload's action ("pull_request.opened"; the more specific
	// route wins); for Slack, a slash command ("/research"), an
	// interactive payload's type ("block_actions") or an Events API
	// event's type ("app_mention").
	Event string `json:"event"`
	// Agent is the slug of one of the Runner's agents.
	Agent string `json:"agent"`
	// Deliver hands the event to Agent's runs waiting for it instead of
	// starting a run: a step parks its run with run.Await{ExternalEvent:
	// Source + ":" + Event}, e.g. "github:check_suite.completed" or
	// "slack:app_mention" (or narrowed: GitHub to a repository,
	// "...:octo/repo", or a pull request or issue, "...:octo/repo#12";
	// Slack to a channel, "...:C7"),
	// and the delivery resumes every run of Agent waiting so, each given
	// the event (its id the delivery's, its payload the JSON a started
	// run's input would be). Answered 200 {"started": false, "delivered":
	// [run ids]}.
	Deliver bool `json:"deliver,omitempty"`
	// Tenant is the tenant the route acts for (docs/http-api.md#tokens-and-tenants):
	// the runs it starts are its, and it hands events to its runs only.
	// Default "": the default tenant.
	Tenant string `json:"tenant,omitempty"`
}

// route is one row of the route table: who may call it and what it does.
type route struct {
	method, path string
	// operator: a view or move over every tenant's records (lanes,
	// schedules, quarantine, metrics), served only to a token of the
	// default tenant or of every tenant; another tenant's token is
	// answered 404 (docs/design.md#tenants).
	operator bool
	// actors admitted; nil admits every actor.
	actors []lifecycle.Actor
	// body: the route takes a JSON body (content type and size checked).
	body bool
	// bodyTimes: the body may be this many times Config.MaxBodyBytes
	// (0: once).
	bodyTimes int64
	// stream: no request timeout (a mounted handler that runs long).
	stream bool
	// traced: the route starts work that continues the caller's trace
	// (its traceparent header), under a server span.
	traced bool
	// guest: a zone guest may call it (the inbox submission only); every
	// other route refuses one.
	guest bool
	h     handlerFunc
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) { return newServer(cfg, nil) }

// newServer is New, serving stream (when not nil) at GET /events/stream.
func newServer(cfg Config, stream http.Handler) (*Server, error) {
	if cfg.Runner == nil {
		return nil, fmt.Errorf("%w: Runner is required", ErrInvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = defaultMaxBodyBytes
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = defaultRequestTimeout
	}
	cfg.Limits = cfg.Limits.withDefaults()
	cs, err := newCursors(cfg.CursorKey, cfg.Store, cfg.Clock)
	if err != nil {
		return nil, err
	}
	metrics, err := newHTTPMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("%w: Registerer: %w", ErrInvalidConfig, err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, tracer: tracing.New(cfg.TracerProvider), metrics: metrics,
		runs: newRunRoutes(cfg.Runner, cs), jobs: &jobRoutes{queue: cfg.Queue, cursors: cs}, inbox: &inboxRoutes{box: cfg.Inbox, cursors: cs},
		callback: &callbackRoute{}, backend: &backendRoutes{proc: cfg.NLM, queue: cfg.Queue, artifacts: cfg.Artifacts}, quarantine: &quarantineRoutes{store: cfg.Store, cursors: cs}, schedules: &scheduleRoutes{sched: cfg.Schedules},
		proposals: &proposalRoutes{cursors: cs}}
	if cfg.Store != nil {
		s.proposals.props = proposals.New(cfg.Store, cfg.Clock.Now, "", cfg.Logger)
	}
	tokens := make(map[string]lifecycle.Actor, len(cfg.Tokens))
	for tok, v := range cfg.Tokens {
		if err := addToken(tokens, tok, string(v)); err != nil {
			return nil, fmt.Errorf("token for %q: %w", v, err)
		}
	}
	s.cfg.Tokens = tokens
	s.stream = stream
	switch {
	case s.backend.artifacts != nil:
	case cfg.Queue != nil:
		s.backend.artifacts = cfg.Queue.Artifacts()
	case cfg.NLM != nil:
		s.backend.artifacts = cfg.NLM.Artifacts()
	}
	switch {
	case cfg.NLMBackend != nil:
		s.callback.sink = nlm.Sink(cfg.Runner, cfg.NLMBackend)
	case cfg.NLM != nil:
		s.callback.sink = nlm.Sink(cfg.Runner, cfg.NLM)
	}
	if err := s.mount(); err != nil {
		return nil, err
	}
	s.specs = map[string]lifecycle.Spec{}
	for _, sp := range []lifecycle.Spec{xmachine.CanonicalRun().Spec(), xmachine.CancelableRun().Spec(), xmachine.ApprovalRun().Spec(), xmachine.RunStep().Spec(), xmachine.JobMachine().Spec(), xmachine.GeneralJobMachine().Spec(), xmachine.NLMMachine().Spec(), xmachine.InboxMachine().Spec()} {
		s.specs[sp.Name] = sp
	}
	s.mux = http.NewServeMux()
	s.routes()
	return s, nil
}

// mount builds the handlers the Server mounts: the event feed, the
// webhooks.
func (s *Server) mount() error {
	cfg := s.cfg
	if cfg.Events && s.stream == nil {
		if cfg.Store == nil {
			return fmt.Errorf("%w: Events needs Store", ErrInvalidConfig)
		}
		feed, err := events.New(events.Config{Store: cfg.Store, Clock: cfg.Clock, Logger: cfg.Logger, PollInterval: cfg.EventPollInterval,
			IdlePollInterval: cfg.EventIdlePollInterval, WriteTimeout: cfg.EventWriteTimeout})
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		s.feed, s.stream = feed, feed
	}
	if cfg.GitHubSecret == "" && cfg.SlackSigningSecret == "" {
		if len(cfg.WebhookRoutes) > 0 {
			return fmt.Errorf("%w: WebhookRoutes without GitHubSecret or SlackSigningSecret", ErrInvalidConfig)
		}
		return nil
	}
	routes := make([]webhook.Route, len(cfg.WebhookRoutes))
	for i, r := range cfg.WebhookRoutes {
		if r.Tenant != "" {
			if err := storekey.ValidateID("webhook route tenant", r.Tenant); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
			}
		}
		routes[i] = webhook.Route(r)
	}
	hooks, err := webhook.New(webhook.Config{Runner: cfg.Runner, Store: cfg.Store, GitHubSecret: cfg.GitHubSecret,
		SlackSigningSecret: cfg.SlackSigningSecret, Routes: routes, Clock: cfg.Clock, Logger: cfg.Logger})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	s.webhooks = hooks
	return nil
}

// Run reads the store for the event feed until ctx ends (Config.Events);
// without a feed it only waits for ctx. Stop it before the http.Server's
// Shutdown: its end ends the event streams Shutdown would wait for.
func (s *Server) Run(ctx context.Context) error {
	if s.feed == nil {
		<-ctx.Done()
		return nil
	}
	return s.feed.Run(ctx)
}

// ServeHTTP authenticates the request, then routes it; a failed request is
// logged (5xx at ERROR, 4xx at DEBUG), one whose client went away at INFO,
// and each is counted (Config.Registerer).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start, route := time.Now(), s.routeOf(r)
	rec := &recorder{ResponseWriter: w}
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		// The body's deadline is set first, before authentication or any
		// other check, so a client that stalls its body is cut off on every
		// route. It is a network deadline, in wall-clock time; the server
		// resets it at the next request on the connection. A request without
		// a body gets none: the event stream must outlive it.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.Limits.BodyTimeout))
		g := &bodyGuard{body: r.Body}
		r.Body, rec.body = g, g
	}
	actor := lifecycle.Actor("")
	if public(r) || (s.webhooks != nil && strings.HasPrefix(r.URL.Path, "/webhooks/")) {
		// Health and the page's assets need no identity; a webhook's is
		// its signature, which its handler checks.
		s.mux.ServeHTTP(rec, r)
	} else if v, err := s.authenticate(r); err != nil {
		s.writeError(rec, r, err)
	} else {
		// The token's tenant confines every call the request makes
		// (docs/design.md#tenants).
		a, tenant, _ := splitTenant(v) // checked by New
		actor = a
		if tenant != "" {
			// The page shows whose records it sees (docs/http-api.md#tokens-and-tenants).
			rec.Header().Set(tenantHeader, tenant)
		}
		ctx := lifecycle.WithTenant(context.WithValue(r.Context(), actorKey{}, a), tenant)
		s.mux.ServeHTTP(rec, r.WithContext(ctx))
	}
	s.served(r, rec, route, actor, start)
}

type actorKey struct{}

// tenantHeader names, on every answer to a token of a tenant other than
// the default one, that tenant ("*": every tenant).
const tenantHeader = "X-Conveyor-Tenant"

// public tells the requests served without a token: health, and the live
// page's static assets (they hold no data; the page sends the token a user
// gives it with each API call, since a browser cannot add a bearer token to
// a navigation).
func public(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	return p == "/healthz" || p == "/" || strings.HasPrefix(p, "/ui/")
}

func (s *Server) routes() {
	var table []route
	for _, part := range [][]route{s.runs.table(), s.jobs.table(), s.inbox.table(), s.schedules.table(), s.quarantine.table(), s.backend.table(), s.proposals.table()} {
		table = append(table, part...)
	}
	table = append(table,
		route{method: "POST", path: "/nlm/callback", operator: true, actors: []lifecycle.Actor{lifecycle.ActorNLMBackend}, body: true, h: s.callback.nlmCallback},
		route{method: "GET", path: "/events/stream", stream: true, h: mounted(s.stream, http.StatusServiceUnavailable)},
		route{method: "GET", path: "/metrics", operator: true, stream: true, h: mounted(s.cfg.Metrics, http.StatusNotFound)},
		route{method: "GET", path: "/healthz", h: func(w http.ResponseWriter, _ *http.Request, _ lifecycle.Actor) error {
			return writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
		}})
	s.table = table
	allow := map[string][]string{}
	for _, rt := range table {
		s.mux.Handle(rt.method+" "+rt.path, s.handler(rt))
		allow[rt.path] = append(allow[rt.path], rt.method)
		if rt.method == "GET" {
			allow[rt.path] = append(allow[rt.path], "HEAD")
		}
	}
	if s.webhooks != nil {
		s.mux.Handle("/webhooks/", s.tracedHandler("/webhooks/", s.webhooks))
	}
	if s.cfg.Page {
		s.mux.Handle("/ui/", page.Handler())
		s.mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
		allow["/{$}"] = []string{"GET", "HEAD"}
	}
	// Another method on a known path: 405 with Allow, in the JSON form.
	for path, methods := range allow {
		if shadowed(path, allow) {
			continue
		}
		slices.Sort(methods)
		list := strings.Join(methods, ", ")
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", list)
			s.writeError(w, r, apiErr(codes.MethodNotAllowed, "%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, list))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, apiErr(codes.NotFound, "no route %s %s", r.Method, r.URL.Path))
	})
}

// shadowed tells whether path, a route's, is also matched by another
// route's path with a wildcard (/jobs/batch by /jobs/{jobId}): its other
// methods go to that route (GET /jobs/batch reads the job "batch"), which
// answers their 405; one of its own would conflict with it.
func shadowed(path string, paths map[string][]string) bool {
	segs := strings.Split(path, "/")
	for other := range paths {
		o := strings.Split(other, "/")
		if other == path || len(o) != len(segs) {
			continue
		}
		match := true
		for i := range o {
			if o[i] != segs[i] && !strings.HasPrefix(o[i], "{") {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// traced gives r the caller's trace context (its traceparent header) and,
// with a TracerProvider, a server span named name within it; the zero Span
// and r itself when there is neither.
func (s *Server) traced(name, route string, r *http.Request) (*http.Request, tracing.Span) {
	ctx := tracing.FromRequest(r)
	ctx, span := s.tracer.Start(ctx, name, trace.SpanKindServer)
	span.String(tracing.AttrHTTPRoute, route)
	span.String(tracing.AttrHTTPMethod, methodLabel(r.Method))
	span.String(tracing.AttrURLPath, r.URL.Path)
	if ctx != r.Context() {
		r = r.WithContext(ctx)
	}
	return r, span
}

// tracedHandler serves h within a server span (see traced).
func (s *Server) tracedHandler(route string, h http.Handler) http.Handler {
	name := "POST " + route
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, span := s.traced(name, route, r)
		defer spanEnd(span, w)
		h.ServeHTTP(w, r)
	})
}

// handler wraps a route: its actor table, its body checks, its deadline
// and, for a traced route, its span.
func (s *Server) handler(rt route) http.Handler {
	name := rt.method + " " + rt.path
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.traced {
			var span tracing.Span
			r, span = s.traced(name, rt.path, r)
			defer spanEnd(span, w)
		}
		actor, _ := r.Context().Value(actorKey{}).(lifecycle.Actor)
		if t := lifecycle.TenantOf(r.Context()); rt.operator && t != "" && t != lifecycle.AllTenants {
			// Before the actor's check: a tenant learns nothing of a route
			// it is not served.
			s.writeError(w, r, apiErr(codes.NotFound, "%s %s is not served to tenant %s", rt.method, rt.path, t))
			return
		}
		if err := refusal(rt, actor); err != nil {
			s.writeError(w, r, err)
			return
		}
		if rt.body {
			if err := checkContentType(r); err != nil {
				s.writeError(w, r, err)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes*max(rt.bodyTimes, 1))
		}
		if !rt.stream {
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		if err := rt.h(w, r, actor); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// mounted serves h, or answers absent (503 for the event feed, so clients
// fall back to polling; 404 otherwise) when it is nil.
func mounted(h http.Handler, absent int) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
		if h == nil {
			if absent == http.StatusServiceUnavailable {
				return apiErr(codes.ServiceUnavailable, "no event feed is served here: poll GET /runs/{runId}/status")
			}
			return apiErr(codes.NotFound, "%s is not served here", r.URL.Path)
		}
		h.ServeHTTP(w, r)
		return nil
	}
}

// The actors of the routes that admit more than one and fewer than all.
var (
	submitters = []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorAdmin, lifecycle.ActorSystem}
	admin      = []lifecycle.Actor{lifecycle.ActorAdmin}
)

// machineActors lists the actors any run machine lets make a move on one of
// events: the route admits them and the machine decides per run.
func machineActors(events ...lifecycle.Event) []lifecycle.Actor {
	var out []lifecycle.Actor
	for _, spec := range []lifecycle.Spec{xmachine.CanonicalRun().Spec(), xmachine.CancelableRun().Spec(), xmachine.ApprovalRun().Spec()} {
		for _, t := range spec.Transitions {
			if !slices.Contains(events, lifecycle.Event(t.Event)) {
				continue
			}
			for _, a := range t.Actors {
				if !slices.Contains(out, a) {
					out = append(out, a)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// matrixActors lists the actors the authority matrix lets perform op on
// jobs; plain admits Allowed cells only (listing every job is no own-job
// read).
func matrixActors(op authority.Operation, plain bool) []lifecycle.Actor {
	var out []lifecycle.Actor
	for _, a := range authority.Actors() {
		p := authority.Lookup(a, authority.Jobs, op)
		if p == authority.Allowed || (!plain && p != authority.Denied) {
			out = append(out, a)
		}
	}
	return out
}

// eventTarget is the state event leads to in the named machine (the first
// such move of its table), or "".
func (s *Server) eventTarget(machine, event string) string {
	for _, t := range s.specs[machine].Transitions {
		if t.Event == event {
			return t.To
		}
	}
	return ""
}

func machineSpec(name string) lifecycle.Spec {
	switch name {
	case lifecycle.MachineCancelable:
		return xmachine.CancelableRun().Spec()
	case lifecycle.MachineApproval:
		return xmachine.ApprovalRun().Spec()
	}
	return xmachine.CanonicalRun().Spec()
}

func joinActors(as []lifecycle.Actor) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}

// recorder remembers the status and error code written, for the log line,
// and closes the connection of an answer given before its body was read.
type recorder struct {
	http.ResponseWriter
	status        int
	code, message string
	// body is the request's body, nil when it has none.
	body *bodyGuard
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
		if r.body != nil && !r.body.done {
			// An answer before the body's end (a refusal: no token, a
			// wrong route, a forbidden actor) reads none of the rest: net/http
			// would read and discard it before writing the answer, which a
			// stalled body holds up to its deadline. The connection is closed
			// instead, at once (the read deadline in the past ends the
			// discard net/http still tries after the handler).
			r.Header().Set("Connection", "close")
			_ = http.NewResponseController(r.ResponseWriter).SetReadDeadline(time.Now())
		}
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	return r.ResponseWriter.Write(b)
}

// Flush lets a mounted event stream flush through the recorder.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap serves http.ResponseController.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
