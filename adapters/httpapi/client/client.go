package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// maxAnswerBytes bounds an answer the client reads (a list of every job
// may be long; anything longer is a broken server).
const maxAnswerBytes = 256 << 20

// Client calls the Worker's HTTP API. Its zero value is not usable: set
// BaseURL. A Client is safe for concurrent use once set up.
type Client struct {
	// BaseURL is the server's root, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// Token is sent as "Authorization: Bearer <Token>" when set.
	Token string
	// Actor is sent as X-Conveyor-Actor when set: the actor of a server
	// that has no tokens (loopback only). A server with tokens ignores it.
	Actor lifecycle.Actor
	// HTTP sends the requests. Default http.DefaultClient.
	HTTP *http.Client
	// Clock times Wait's and WatchInbox's polling. Default the wall clock.
	Clock clock.Clock
}

// conn is what one call needs of the Client: where and as whom to send,
// and the clock. It is a copy, taken at the call.
type conn struct {
	base, token string
	actor       lifecycle.Actor
	http        *http.Client
	clock       clock.Clock
}

// connOf is c's conn at the call (a function, not a method: the Client's
// methods are its routes).
func connOf(c *Client) conn {
	k := conn{base: strings.TrimRight(c.BaseURL, "/"), token: c.Token, actor: c.Actor, http: c.HTTP, clock: c.Clock}
	if k.http == nil {
		k.http = http.DefaultClient
	}
	if k.clock == nil {
		k.clock = clock.Real()
	}
	return k
}

// newRequest builds a request to path (already escaped) with query and a
// JSON body (nil: none).
func (k conn) newRequest(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	u := k.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if k.token != "" {
		req.Header.Set("Authorization", "Bearer "+k.token)
	}
	if k.actor != "" {
		req.Header.Set(wire.ActorHeader, string(k.actor))
	}
	injectTrace(ctx, req.Header)
	return req, nil
}

// injectTrace writes the caller's trace context into h as the W3C
// traceparent and tracestate headers (docs/spec.md#tracing), byte for byte
// what OpenTelemetry's TraceContext propagator writes; written here so the
// client needs only the trace API, not the propagators.
func injectTrace(ctx context.Context, h http.Header) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	h.Set("traceparent", "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-"+(sc.TraceFlags()&trace.FlagsSampled).String())
	if ts := sc.TraceState().String(); ts != "" {
		h.Set("tracestate", ts)
	}
}

// send sends a request and decodes a 2xx answer into out (nil: discard);
// any other answer is an *Error. It returns the answer's header.
func (k conn) send(req *http.Request, out any) (http.Header, error) {
	resp, err := k.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return resp.Header, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.Header, decodeError(resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.Header, fmt.Errorf("httpapi: decoding the answer of %s %s: %w", req.Method, req.URL.Path, err)
		}
	}
	return resp.Header, nil
}

// call makes one request and decodes its answer into out.
func (k conn) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	req, err := k.newRequest(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	_, err = k.send(req, out)
	return err
}

// get is a call whose answer is one value of type T.
func get[T any](ctx context.Context, k conn, method, path string, body any) (T, error) {
	var out T
	err := k.call(ctx, method, path, nil, body, &out)
	return out, err
}

func runPath(runID, what string) string { return "/runs/" + url.PathEscape(runID) + what }

// Submit asks for a run (POST /agents/run): AgentSlug, Trigger, Input,
// Caller.UserID and Caller.Metadata go in the body and IdempotencyKey in
// X-Idempotency-Key (the server makes it api:{actor}:{key}, the caller's
// namespace, unless it already starts with api:{actor}:).
// Caller.Initiator is not sent: the server derives it from the trigger.
func (c *Client) Submit(ctx context.Context, sr lifecycle.SubmitRequest) (lifecycle.SubmitResult, error) {
	k := connOf(c)
	body := wire.SubmitBody{AgentSlug: sr.AgentSlug, Trigger: sr.Trigger, Source: sr.Source, Input: sr.Input, UserID: sr.UserID, Metadata: sr.Metadata}
	req, err := k.newRequest(ctx, http.MethodPost, "/agents/run", nil, body)
	if err != nil {
		return lifecycle.SubmitResult{}, err
	}
	if sr.IdempotencyKey != "" {
		req.Header.Set(wire.IdempotencyKeyHeader, sr.IdempotencyKey)
	}
	var a wire.SubmitAnswer
	if _, err := k.send(req, &a); err != nil {
		return lifecycle.SubmitResult{}, err
	}
	return lifecycle.SubmitResult{RunID: a.RunID, Duplicate: a.Duplicate}, nil
}

// Status reads a run's status.json (GET /runs/{runId}/status).
func (c *Client) Status(ctx context.Context, runID string) (lifecycle.RunStatus, error) {
	return get[lifecycle.RunStatus](ctx, connOf(c), http.MethodGet, runPath(runID, "/status"), nil)
}

// Steps reads a run's step files (GET /runs/{runId}/steps).
func (c *Client) Steps(ctx context.Context, runID string) ([]lifecycle.StepRecord, error) {
	return get[[]lifecycle.StepRecord](ctx, connOf(c), http.MethodGet, runPath(runID, "/steps"), nil)
}

// Cancel asks a run to stop (POST /runs/{runId}/cancel).
func (c *Client) Cancel(ctx context.Context, runID, reason string) (lifecycle.RunStatus, error) {
	return get[lifecycle.RunStatus](ctx, connOf(c), http.MethodPost, runPath(runID, "/cancel"), wire.CancelBody{Reason: reason})
}

// Decide resumes (approve) or fails (not approve) a run waiting at its
// approval gate (POST /runs/{runId}/approve or /reject). An empty
// decidedBy is the caller's actor. payload, JSON of at most 1 MiB or nil
// for none, is handed with decidedBy and reason to the steps after the
// gate.
func (c *Client) Decide(ctx context.Context, runID string, approve bool, decidedBy, reason string, payload json.RawMessage) (lifecycle.RunStatus, error) {
	verb := "/reject"
	if approve {
		verb = "/approve"
	}
	return get[lifecycle.RunStatus](ctx, connOf(c), http.MethodPost, runPath(runID, verb), wire.DecisionBody{DecidedBy: decidedBy, Reason: reason, Payload: payload})
}

// Deliver hands a run the external event it waits for (POST
// /runs/{runId}/events). payload, the event's JSON of at most 1 MiB or nil
// for none, is handed with the event to the steps after the wait.
func (c *Client) Deliver(ctx context.Context, runID, eventType, eventID, source string, payload json.RawMessage) (lifecycle.RunStatus, error) {
	return get[lifecycle.RunStatus](ctx, connOf(c), http.MethodPost, runPath(runID, "/events"),
		wire.EventBody{Type: eventType, ID: eventID, Source: source, Payload: payload})
}

// Agents lists the agents the server's Runner executes (GET /agents).
func (c *Client) Agents(ctx context.Context) ([]lifecycle.AgentInfo, error) {
	return get[[]lifecycle.AgentInfo](ctx, connOf(c), http.MethodGet, "/agents", nil)
}

// Enqueue creates a job (POST /jobs). Its Delay counts from the server's
// clock when the job arrives, its RunAt is a time as it is; the job starts
// no earlier than either. A unique job (lifecycle.NewJob.Unique) whose
// uniqueness a job holds is answered by that job, its Duplicate set.
func (c *Client) Enqueue(ctx context.Context, n lifecycle.NewJob) (lifecycle.Job, error) {
	return get[lifecycle.Job](ctx, connOf(c), http.MethodPost, "/jobs", jobBody(n))
}

func jobBody(n lifecycle.NewJob) wire.JobBody {
	b := wire.JobBody{JobID: n.JobID, RunID: n.RunID, JobType: n.JobType, AgentSlug: n.AgentSlug, MaxAttempts: n.MaxAttempts,
		Payload: n.Payload, Context: n.Context, Callback: n.Callback, ProjectID: n.ProjectID,
		Priority: n.Priority, RunAt: n.RunAt, Queue: n.Queue}
	if n.Delay != 0 {
		b.Delay = n.Delay.String() // by the server's clock, as the queue's
	}
	if u := n.Unique; u != nil {
		b.Unique = &wire.UniqueBody{Key: u.Key, States: u.States}
		if u.Period != 0 {
			b.Unique.Period = u.Period.String()
		}
	}
	return b
}

// EnqueueMany creates jobs as one batch (POST /jobs/batch): 1 to 10,000
// jobs, in a body of at most 8 times the server's MaxBodyBytes. It
// returns the jobs created, in order. A batch that failed at one of its
// jobs, or after some landed, gives a *lifecycle.BatchError naming the
// job's index, whose Err is the *Error, and its Landed jobs, the batch's
// first ones, returned: the server writes 500 jobs a commit where its
// store commits several writes at once (each commit all or nothing), else
// one at a time (docs/spec.md#batch-insert). Any other error wrote
// nothing, but UPSTREAM_UNAVAILABLE, after which all the jobs may have
// landed or none.
func (c *Client) EnqueueMany(ctx context.Context, jobs []lifecycle.NewJob) ([]lifecycle.Job, error) {
	body := wire.BatchBody{Jobs: make([]wire.JobBody, len(jobs))}
	for i, n := range jobs {
		body.Jobs[i] = jobBody(n)
	}
	a, err := get[wire.BatchAnswer](ctx, connOf(c), http.MethodPost, "/jobs/batch", body)
	if e, ok := errors.AsType[*Error](err); ok && e.batch != nil {
		return e.batch.Landed, &lifecycle.BatchError{Index: e.batch.Index, Landed: len(e.batch.Landed), Err: e}
	}
	return a.Jobs, err
}

// Job reads a job (GET /jobs/{jobId}).
func (c *Client) Job(ctx context.Context, jobID string) (lifecycle.Job, error) {
	return get[lifecycle.Job](ctx, connOf(c), http.MethodGet, "/jobs/"+url.PathEscape(jobID), nil)
}

// Requeue is the admin's requeue of a FAILED or DEAD job (POST
// /jobs/{jobId}/requeue).
func (c *Client) Requeue(ctx context.Context, jobID string) (lifecycle.Job, error) {
	return get[lifecycle.Job](ctx, connOf(c), http.MethodPost, "/jobs/"+url.PathEscape(jobID)+"/requeue", nil)
}

// Schedules lists the schedules with their next and last slots and runs
// (GET /schedules).
func (c *Client) Schedules(ctx context.Context) ([]lifecycle.ScheduleInfo, error) {
	return get[[]lifecycle.ScheduleInfo](ctx, connOf(c), http.MethodGet, "/schedules", nil)
}

// PauseSchedule pauses a schedule in every process (POST
// /schedules/{id}/pause, admin), or, with pause false, lets it fire again
// from its next slot (POST /schedules/{id}/resume).
func (c *Client) PauseSchedule(ctx context.Context, id string, pause bool) (lifecycle.ScheduleInfo, error) {
	verb := "/resume"
	if pause {
		verb = "/pause"
	}
	return get[lifecycle.ScheduleInfo](ctx, connOf(c), http.MethodPost, "/schedules/"+url.PathEscape(id)+verb, nil)
}

// NLMCallback posts an NLM backend's callback (POST /nlm/callback).
func (c *Client) NLMCallback(ctx context.Context, cb lifecycle.NLMCallbackBody) error {
	return connOf(c).call(ctx, http.MethodPost, "/nlm/callback", nil, cb, nil)
}

// SubmitInbox submits an inbox entry (POST /inbox/submit) and returns its
// id; the entry is pending.
func (c *Client) SubmitInbox(ctx context.Context, sub lifecycle.InboxSubmission) (string, error) {
	a, err := get[wire.InboxAnswer](ctx, connOf(c), http.MethodPost, "/inbox/submit", sub)
	return a.InboxID, err
}

// InboxStats counts the inbox's entries by state (GET /inbox/stats).
func (c *Client) InboxStats(ctx context.Context) (lifecycle.InboxStats, error) {
	return get[lifecycle.InboxStats](ctx, connOf(c), http.MethodGet, "/inbox/stats", nil)
}

// Restore puts a quarantined record back at its key (POST
// /quarantine/restore).
func (c *Client) Restore(ctx context.Context, qkey string) error {
	return connOf(c).call(ctx, http.MethodPost, "/quarantine/restore", nil, wire.RestoreBody{QKey: qkey}, nil)
}

// Health checks that the server answers (GET /healthz).
func (c *Client) Health(ctx context.Context) error {
	return connOf(c).call(ctx, http.MethodGet, "/healthz", nil, nil, nil)
}
