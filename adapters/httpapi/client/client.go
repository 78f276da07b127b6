package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/internal/tracing"
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
	// Clock times Wait's polling. Default the wall clock.
	Clock clock.Clock
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) clock() clock.Clock {
	if c.Clock != nil {
		return c.Clock
	}
	return clock.Real()
}

// newRequest builds a request to path (already escaped) with query and a
// JSON body (nil: none).
func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	u := strings.TrimRight(c.BaseURL, "/") + path
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
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Actor != "" {
		req.Header.Set(ActorHeader, string(c.Actor))
	}
	// The caller's trace goes with the request (docs/spec.md#tracing).
	tracing.Inject(ctx, req.Header)
	return req, nil
}

// do sends a request and decodes a 2xx answer into out (nil: discard); any
// other answer is an *Error. It returns the status.
func (c *Client) do(req *http.Request, out any) (int, error) {
	status, _, err := c.send(req, out)
	return status, err
}

// send is do, returning the answer's header too.
func (c *Client) send(req *http.Request, out any) (int, http.Header, error) {
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return resp.StatusCode, resp.Header, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, resp.Header, decodeError(resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, resp.Header, fmt.Errorf("httpapi: decoding the answer of %s %s: %w", req.Method, req.URL.Path, err)
		}
	}
	return resp.StatusCode, resp.Header, nil
}

func (c *Client) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	_, err = c.do(req, out)
	return err
}

func runPath(runID, what string) string { return "/runs/" + url.PathEscape(runID) + what }

// Submit asks for a run (POST /agents/run): AgentSlug, Trigger, Input,
// Caller.UserID and Caller.Metadata go in the body and IdempotencyKey in
// X-Idempotency-Key (the server makes it api:{actor}:{key}, the caller's
// namespace, unless it already starts with api:{actor}:).
// Caller.Initiator is not sent: the server derives it from the trigger.
func (c *Client) Submit(ctx context.Context, sr lifecycle.SubmitRequest) (lifecycle.SubmitResult, error) {
	body := wire.SubmitBody{AgentSlug: sr.AgentSlug, Trigger: sr.Trigger, Input: sr.Input, UserID: sr.UserID, Metadata: sr.Metadata}
	req, err := c.newRequest(ctx, http.MethodPost, "/agents/run", nil, body)
	if err != nil {
		return lifecycle.SubmitResult{}, err
	}
	if sr.IdempotencyKey != "" {
		req.Header.Set(IdempotencyKeyHeader, sr.IdempotencyKey)
	}
	var a wire.SubmitAnswer
	if _, err := c.do(req, &a); err != nil {
		return lifecycle.SubmitResult{}, err
	}
	return lifecycle.SubmitResult{RunID: a.RunID, Duplicate: a.Duplicate}, nil
}

// Status reads a run's status.json (GET /runs/{runId}/status).
func (c *Client) Status(ctx context.Context, runID string) (lifecycle.RunStatus, error) {
	var st lifecycle.RunStatus
	err := c.call(ctx, http.MethodGet, runPath(runID, "/status"), nil, nil, &st)
	return st, err
}

// Steps reads a run's step files (GET /runs/{runId}/steps).
func (c *Client) Steps(ctx context.Context, runID string) ([]lifecycle.StepRecord, error) {
	var out []lifecycle.StepRecord
	err := c.call(ctx, http.MethodGet, runPath(runID, "/steps"), nil, nil, &out)
	return out, err
}

// Runs reads the status of every run of an agent, newest first, following
// the pages of GET /runs?agent= to the end (AllRuns and RunsPage read them
// one at a time).
func (c *Client) Runs(ctx context.Context, agentSlug string) ([]lifecycle.RunStatus, error) {
	return collect(c.AllRuns(ctx, RunsQuery{Agent: agentSlug, Page: Page{Limit: 500}}))
}

// Cancel asks a run to stop (POST /runs/{runId}/cancel).
func (c *Client) Cancel(ctx context.Context, runID, reason string) (lifecycle.RunStatus, error) {
	var st lifecycle.RunStatus
	err := c.call(ctx, http.MethodPost, runPath(runID, "/cancel"), nil, wire.CancelBody{Reason: reason}, &st)
	return st, err
}

// Approve resumes a run waiting at its approval gate (POST
// /runs/{runId}/approve). An empty decidedBy is the caller's actor.
func (c *Client) Approve(ctx context.Context, runID, decidedBy, reason string) (lifecycle.RunStatus, error) {
	var st lifecycle.RunStatus
	err := c.call(ctx, http.MethodPost, runPath(runID, "/approve"), nil, wire.DecisionBody{DecidedBy: decidedBy, Reason: reason}, &st)
	return st, err
}

// Reject fails a run waiting at its approval gate (POST
// /runs/{runId}/reject).
func (c *Client) Reject(ctx context.Context, runID, decidedBy, reason string) (lifecycle.RunStatus, error) {
	var st lifecycle.RunStatus
	err := c.call(ctx, http.MethodPost, runPath(runID, "/reject"), nil, wire.DecisionBody{DecidedBy: decidedBy, Reason: reason}, &st)
	return st, err
}

// Deliver hands a run the external event it waits for (POST
// /runs/{runId}/events).
func (c *Client) Deliver(ctx context.Context, runID, eventType, eventID, source string) (lifecycle.RunStatus, error) {
	var st lifecycle.RunStatus
	err := c.call(ctx, http.MethodPost, runPath(runID, "/events"), nil, wire.EventBody{Type: eventType, ID: eventID, Source: source}, &st)
	return st, err
}

// Agents lists the agents the server's Runner executes (GET /agents).
func (c *Client) Agents(ctx context.Context) ([]AgentInfo, error) {
	var out []AgentInfo
	err := c.call(ctx, http.MethodGet, "/agents", nil, nil, &out)
	return out, err
}

// Enqueue creates a job (POST /jobs).
func (c *Client) Enqueue(ctx context.Context, n lifecycle.NewJob) (lifecycle.Job, error) {
	body := wire.JobBody{JobID: n.JobID, RunID: n.RunID, JobType: n.JobType, AgentSlug: n.AgentSlug, MaxAttempts: n.MaxAttempts,
		Payload: n.Payload, Context: n.Context, Callback: n.Callback, ProjectID: n.ProjectID}
	var j lifecycle.Job
	err := c.call(ctx, http.MethodPost, "/jobs", nil, body, &j)
	return j, err
}

// Jobs lists every job, following the pages of GET /jobs to the end
// (JobsPage reads one).
func (c *Client) Jobs(ctx context.Context) ([]lifecycle.Job, error) {
	return collect(pages(func(cursor string) ([]lifecycle.Job, string, error) {
		return c.JobsPage(ctx, JobsQuery{Page: Page{Limit: 500, Cursor: cursor}})
	}, ""))
}

// Job reads a job (GET /jobs/{jobId}).
func (c *Client) Job(ctx context.Context, jobID string) (lifecycle.Job, error) {
	var j lifecycle.Job
	err := c.call(ctx, http.MethodGet, "/jobs/"+url.PathEscape(jobID), nil, nil, &j)
	return j, err
}

// Requeue is the admin's requeue of a FAILED or DEAD job (POST
// /jobs/{jobId}/requeue).
func (c *Client) Requeue(ctx context.Context, jobID string) (lifecycle.Job, error) {
	var j lifecycle.Job
	err := c.call(ctx, http.MethodPost, "/jobs/"+url.PathEscape(jobID)+"/requeue", nil, nil, &j)
	return j, err
}

// Schedules lists the schedules with their next and last slots and runs
// (GET /schedules).
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	var out []Schedule
	err := c.call(ctx, http.MethodGet, "/schedules", nil, nil, &out)
	return out, err
}

// PauseSchedule pauses a schedule in every process (POST
// /schedules/{id}/pause, admin); ResumeSchedule lets it fire again.
func (c *Client) PauseSchedule(ctx context.Context, id string) (Schedule, error) {
	var out Schedule
	err := c.call(ctx, http.MethodPost, "/schedules/"+url.PathEscape(id)+"/pause", nil, nil, &out)
	return out, err
}

// ResumeSchedule lets a paused schedule fire again from its next slot
// (POST /schedules/{id}/resume, admin).
func (c *Client) ResumeSchedule(ctx context.Context, id string) (Schedule, error) {
	var out Schedule
	err := c.call(ctx, http.MethodPost, "/schedules/"+url.PathEscape(id)+"/resume", nil, nil, &out)
	return out, err
}

// NLMCallback posts an NLM backend's callback (POST /nlm/callback).
func (c *Client) NLMCallback(ctx context.Context, cb lifecycle.NLMCallbackBody) error {
	return c.call(ctx, http.MethodPost, "/nlm/callback", nil, cb, nil)
}

// SubmitInbox submits an inbox entry (POST /inbox/submit) and returns its
// id; the entry is pending.
func (c *Client) SubmitInbox(ctx context.Context, sub lifecycle.InboxSubmission) (string, error) {
	var a wire.InboxAnswer
	err := c.call(ctx, http.MethodPost, "/inbox/submit", nil, sub, &a)
	return a.InboxID, err
}

// InboxStats counts the inbox's entries by state (GET /inbox/stats).
func (c *Client) InboxStats(ctx context.Context) (lifecycle.InboxStats, error) {
	var st lifecycle.InboxStats
	err := c.call(ctx, http.MethodGet, "/inbox/stats", nil, nil, &st)
	return st, err
}

// InboxEntries lists the inbox's entries, of one state when status is set,
// following the pages of GET /inbox/entries?status= to the end
// (InboxPage reads one).
func (c *Client) InboxEntries(ctx context.Context, status lifecycle.InboxState) ([]lifecycle.InboxEntry, error) {
	return collect(pages(func(cursor string) ([]lifecycle.InboxEntry, string, error) {
		return c.InboxPage(ctx, status, Page{Limit: 500, Cursor: cursor})
	}, ""))
}

// InboxPage reads one page of inbox entries (GET /inbox/entries), of one
// state when status is set, and the cursor of the next page ("" on the last).
func (c *Client) InboxPage(ctx context.Context, status lifecycle.InboxState, p Page) ([]lifecycle.InboxEntry, string, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", string(status))
	}
	var out []lifecycle.InboxEntry
	next, err := c.page(ctx, "/inbox/entries", p.values(q), &out)
	return out, next, err
}

// Quarantine lists the quarantined records, following the pages of GET
// /quarantine to the end (QuarantinePage reads one).
func (c *Client) Quarantine(ctx context.Context) ([]lifecycle.Quarantined, error) {
	return collect(pages(func(cursor string) ([]lifecycle.Quarantined, string, error) {
		return c.QuarantinePage(ctx, Page{Limit: 500, Cursor: cursor})
	}, ""))
}

// QuarantinePage reads one page of quarantined records in key order (GET
// /quarantine) and the cursor of the next page ("" on the last).
func (c *Client) QuarantinePage(ctx context.Context, p Page) ([]lifecycle.Quarantined, string, error) {
	var raw []wire.Quarantined
	next, err := c.page(ctx, "/quarantine", p.values(nil), &raw)
	if err != nil {
		return nil, "", err
	}
	out := make([]lifecycle.Quarantined, len(raw))
	for i, q := range raw {
		out[i] = q.Quarantined
		out[i].QKey = q.QKey
	}
	return out, next, nil
}

// Restore puts a quarantined record back at its key (POST
// /quarantine/restore).
func (c *Client) Restore(ctx context.Context, qkey string) error {
	return c.call(ctx, http.MethodPost, "/quarantine/restore", nil, wire.RestoreBody{QKey: qkey}, nil)
}

// Health checks that the server answers (GET /healthz).
func (c *Client) Health(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/healthz", nil, nil, nil)
}
