package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// Sources of webhooks, as Route.Source and the path's last segment name them.
const (
	SourceGitHub = "github"
	SourceSlack  = "slack"
)

// Limits and windows of the intake.
const (
	// DefaultMaxBodyBytes bounds a body when Config.MaxBodyBytes is 0.
	// GitHub caps its payloads at 25 MB, but the ones that start runs (pull
	// requests, issues, comments) are tens of KiB; raise it for pushes with
	// many commits.
	DefaultMaxBodyBytes = 1 << 20
	// DedupeWindow is the secondary dedupe span for GitHub (docs/spec.md#idempotency).
	DedupeWindow = 5 * time.Second
	// ReplayWindow is how far a Slack request's timestamp may be from the
	// clock, either way.
	ReplayWindow = 5 * time.Minute
	// SlackTriggerValidity is how long a Slack trigger id is valid, and so how long its key answers the first run at least.
	SlackTriggerValidity = 30 * time.Minute
)

// absorbedTTL is how long a delivery absorbed by a window answers the
// first's run: the completed TTL of docs/spec.md#idempotency, as the first's own record.
const absorbedTTL = 24 * time.Hour

// DuplicateHeader is set to "true" on the answer to a duplicate delivery,
// whose status and body are the first delivery's.
const DuplicateHeader = "X-Conveyor-Duplicate"

// ErrInvalidConfig is matched by New's errors about its Config.
var ErrInvalidConfig = errors.New("webhook: invalid config")

// Route maps an event of a source to the agent it starts.
type Route struct {
	// Source is SourceGitHub or SourceSlack.
	Source string
	// Event is, for GitHub, the X-GitHub-Event ("pull_request"), optionally
	// with the payload's action ("pull_request.opened"; the more specific
	// route wins); for Slack, a slash command ("/research"), an
	// interactive payload's type ("block_actions") or an Events API
	// event's type ("app_mention"; Slack's two sets of names do not meet).
	Event string
	// Agent is the slug of one of the Runner's agents.
	Agent string
	// Deliver hands the event to Agent's runs that wait for it, instead of
	// starting a run: a run waits with an external wait of type Source,
	// ":" and Event ("github:check_suite.completed", "slack:app_mention"),
	// optionally narrowed (GitHub: ":{repository}" or
	// ":{repository}#{number}"; Slack: ":{channel_id}"), and each such run
	// resumes with the event, its payload the object a started run's input
	// would be.
	Deliver bool
	// Tenant is the tenant the route acts for: the runs it starts are
	// its, and it hands events to its runs only ("" the default tenant).
	Tenant string
}

// Config configures a Handler.
type Config struct {
	// Runner starts the runs; required.
	Runner *run.Runner
	// Store is the Runner's store, which holds the runs' idempotency
	// records and GitHub's secondary dedupe records; required when a
	// source is served.
	Store *storage.Store
	// GitHubSecret and SlackSigningSecret authenticate their sources; a
	// source without one is not served (404).
	GitHubSecret       string
	SlackSigningSecret string
	// Routes map events to agents; an event without one is answered
	// "started": false.
	Routes []Route
	// Clock defaults to the wall clock; it judges Slack's timestamps and
	// the dedupe windows.
	Clock clock.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds a body; default DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// Handler serves the webhooks; see the package doc for its answers.
type Handler struct {
	cfg    Config
	clock  clock.Clock
	log    *slog.Logger
	routes map[string]map[string]Route // source → event → route
}

// New checks cfg and returns its Handler: every route names a source with a
// secret, an event of that source's form, and an agent of the Runner.
func New(cfg Config) (*Handler, error) {
	bad := func(format string, args ...any) (*Handler, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if cfg.Runner == nil {
		return bad("Runner is required")
	}
	if (cfg.GitHubSecret != "" || cfg.SlackSigningSecret != "") && cfg.Store == nil {
		return bad("Store is required to serve a source (its idempotency and dedupe records)")
	}
	if cfg.MaxBodyBytes < 0 {
		return bad("MaxBodyBytes %d is negative", cfg.MaxBodyBytes)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	agents := map[string]bool{}
	for _, a := range cfg.Runner.Agents() {
		agents[a.Slug] = true
	}
	h := &Handler{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, routes: map[string]map[string]Route{}}
	for i, rt := range cfg.Routes {
		var ok bool
		switch rt.Source {
		case SourceGitHub:
			event, action, hasAction := strings.Cut(rt.Event, ".")
			ok = validName(event) && (!hasAction || validName(action))
			if !h.serves(SourceGitHub) {
				return bad("route %d: GitHub routes need GitHubSecret", i)
			}
		case SourceSlack:
			ok = validSlackEvent(rt.Event)
			if !h.serves(SourceSlack) {
				return bad("route %d: Slack routes need SlackSigningSecret", i)
			}
		default:
			return bad("route %d: source %q is not %q or %q", i, rt.Source, SourceGitHub, SourceSlack)
		}
		if !ok {
			return bad("route %d: %q is not a %s event", i, rt.Event, rt.Source)
		}
		if !agents[rt.Agent] {
			return bad("route %d: the Runner has no agent %q", i, rt.Agent)
		}
		if h.routes[rt.Source] == nil {
			h.routes[rt.Source] = map[string]Route{}
		}
		if prev, dup := h.routes[rt.Source][rt.Event]; dup {
			return bad("route %d: %s %q is routed twice (to %q and %q)", i, rt.Source, rt.Event, prev.Agent, rt.Agent)
		}
		h.routes[rt.Source][rt.Event] = rt
	}
	return h, nil
}

// serves tells whether a source has its secret.
func (h *Handler) serves(source string) bool {
	switch source {
	case SourceGitHub:
		return h.cfg.GitHubSecret != ""
	case SourceSlack:
		return h.cfg.SlackSigningSecret != ""
	}
	return false
}

// route finds the agent of an event that starts a run; the first name
// that has a route wins.
func (h *Handler) route(source string, events ...string) string {
	if rt, ok := h.routeOf(source, events...); ok && !rt.Deliver {
		return rt.Agent
	}
	return ""
}

// routeOf finds the route of an event, whichever it does; the first name
// that has one wins.
func (h *Handler) routeOf(source string, events ...string) (Route, bool) {
	for _, e := range events {
		if rt, ok := h.routes[source][e]; ok && e != "" {
			return rt, true
		}
	}
	return Route{}, false
}

// answer is a 2xx answer; a duplicate's is the first delivery's.
type answer struct {
	status    int
	body      any
	duplicate bool
}

// ServeHTTP answers POST /webhooks/github and POST /webhooks/slack.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	source, ok := strings.CutPrefix(r.URL.Path, "/webhooks/")
	if !ok || !h.serves(source) {
		h.writeError(w, r, source, webhookErr(codes.NotFound, "no webhook is served at %s", r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.writeError(w, r, source, webhookErr(codes.MethodNotAllowed, "%s %s: only POST", r.Method, r.URL.Path))
		return
	}
	// The run a delivery starts continues the sender's trace, when it
	// sent a traceparent header (docs/spec.md#tracing).
	if ctx := tracing.FromRequest(r); ctx != r.Context() {
		r = r.WithContext(ctx)
	}
	var a answer
	var err error
	switch source {
	case SourceGitHub:
		a, err = h.github(w, r)
	default:
		a, err = h.slack(w, r)
	}
	if err != nil {
		h.writeError(w, r, source, err)
		return
	}
	if a.duplicate {
		w.Header().Set(DuplicateHeader, "true")
	}
	writeJSON(w, a.status, a.body)
}

// checkMediaType refuses a Content-Type that is none of allowed (a charset
// parameter, if any, must be UTF-8) and returns its media type.
func checkMediaType(r *http.Request, allowed ...string) (string, error) {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil {
		for k, v := range params {
			if k != "charset" || !strings.EqualFold(v, "utf-8") {
				err = errors.New("parameter")
			}
		}
	}
	for _, a := range allowed {
		if err == nil && mt == a {
			return mt, nil
		}
	}
	return "", webhookErr(codes.UnsupportedMediaType, "the body must be %s, not %q", strings.Join(allowed, " or "), ct)
}

// readBody reads the raw body, which the signature covers, bounded by
// MaxBodyBytes: a longer one is INPUT_TOO_LARGE, refused before it is read
// when its Content-Length says so.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	limit := h.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, webhookErr(codes.InputTooLarge, "the body is over %d bytes", limit)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, webhookErr(codes.InputTooLarge, "the body is over %d bytes", limit)
	}
	if err != nil {
		return nil, webhookErr(codes.InvalidRequest, "reading the body: %v", err)
	}
	return b, nil
}

// submit starts a run for a routed delivery under its idempotency key.
func (h *Handler) submit(ctx context.Context, agent, key string, input any, caller lifecycle.Caller, about ...func(*lifecycle.SubmitRequest)) (lifecycle.SubmitResult, error) {
	in, err := json.Marshal(input)
	if err != nil {
		return lifecycle.SubmitResult{}, err
	}
	req := lifecycle.SubmitRequest{
		AgentSlug: agent, Trigger: "event", Source: "webhook", Input: in, IdempotencyKey: key, Caller: caller,
	}
	for _, f := range about {
		f(&req)
	}
	return h.cfg.Runner.Submit(ctx, req)
}

func (h *Handler) logStarted(ctx context.Context, source, key, event, agent string, a answer, runID string) {
	h.log.LogAttrs(ctx, slog.LevelInfo, "webhook_accepted",
		slog.String("source", source), slog.String("key", key), slog.String("event", event),
		slog.String("agent", agent), slog.String("runId", runID), slog.Int("status", a.status),
		slog.Bool("duplicate", a.duplicate))
}

// webhookError is an error the intake finds itself, with its code.
type webhookError struct{ code, msg string }

func (e *webhookError) Error() string { return e.msg }
func (e *webhookError) Code() string  { return e.code }

func webhookErr(code, format string, args ...any) error {
	return &webhookError{code: code, msg: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON of every error answer, as adapters/httpapi's.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError answers err as {"code", "message"} with its code's status. A
// 5xx's message is generic: the sender is outside, and the error names
// store keys; the log keeps it.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, source string, err error) {
	code := lifecycle.ErrorCode(err)
	switch {
	case code != codes.InternalError:
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.UpstreamUnavailable
	}
	status := codes.HTTPStatus(code)
	msg := err.Error()
	level := slog.LevelInfo
	switch {
	case status >= 500:
		level, msg = slog.LevelError, "the delivery could not be processed; deliver it again"
	case status == http.StatusUnauthorized:
		level = slog.LevelWarn // someone without the secret, or a replay
	}
	h.log.LogAttrs(r.Context(), level, "webhook_refused", slog.String("source", source),
		slog.String("code", code), slog.Int("status", status), slog.String("error", err.Error()),
		slog.String("remote", r.RemoteAddr))
	writeJSON(w, status, errorBody{Code: code, Message: msg})
}

// writeJSON answers v as JSON; a client gone away is not told more.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":"`+codes.InternalError+`","message":"encoding the answer"}`)
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// validName is a GitHub event or action name: 1 to 64 bytes of [a-z0-9_].
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// validSlackEvent is a slash command ("/" and 1 to 63 bytes of one line of
// clean text without spaces) or a payload type (a validName).
func validSlackEvent(s string) bool {
	if cmd, ok := strings.CutPrefix(s, "/"); ok {
		return cmd != "" && len(s) <= 64 && !strings.ContainsAny(cmd, " /") &&
			codes.CheckText("command", s, 64, codes.OneLine) == nil
	}
	return validName(s)
}

// validKeyPart is a part of an idempotency key taken from a delivery (a
// delivery, team or trigger id): 1 to 128 bytes of [A-Za-z0-9._-], so it
// is a valid storage id and holds no ":" to blur the key's parts.
func validKeyPart(s string) bool {
	return storekey.ValidateID("id", s) == nil && !strings.Contains(s, ":")
}
