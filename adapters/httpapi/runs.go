package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// runRoutes serves the run routes over the Runner: submit, the agents, a
// run's status and steps, the list of runs, and the moves a caller makes
// (cancel, approve, reject, an external event).
type runRoutes struct {
	runner  *run.Runner
	agents  []lifecycle.AgentInfo
	slugs   map[string]bool
	cursors *cursors
}

func newRunRoutes(r *run.Runner, cs *cursors) *runRoutes {
	h := &runRoutes{runner: r, slugs: map[string]bool{}, cursors: cs}
	for _, a := range r.Agents() {
		info := lifecycle.AgentInfo{Slug: a.Slug, Machine: a.Machine, Spec: machineSpec(a.Machine), Concurrency: a.Concurrency}
		for _, st := range a.Steps {
			info.Steps = append(info.Steps, st.Name)
		}
		info.After = graphOf(a.Steps)
		h.agents = append(h.agents, info)
		h.slugs[a.Slug] = true
	}
	return h
}

func (h *runRoutes) table() []route {
	return []route{
		{method: "POST", path: "/agents/run", actors: submitters, body: true, traced: true, h: h.submitRun},
		{method: "GET", path: "/agents", h: h.listAgents},
		{method: "GET", path: "/runs", h: h.listRuns()},
		{method: "GET", path: "/runs/{runId}/status", h: h.runStatus()},
		{method: "GET", path: "/runs/{runId}/steps", h: h.runSteps()},
		{method: "GET", path: "/runs/{runId}/input", h: h.runInput()},
		{method: "POST", path: "/runs/{runId}/cancel", actors: machineActors(machine.EventCancel, machine.EventRequestCancel), body: true, h: h.cancelRun()},
		{method: "POST", path: "/runs/{runId}/approve", actors: machineActors(machine.EventApprove), body: true, h: h.decide(true)},
		{method: "POST", path: "/runs/{runId}/reject", actors: machineActors(machine.EventReject), body: true, h: h.decide(false)},
		{method: "POST", path: "/runs/{runId}/events", actors: machineActors(machine.EventDeliver), body: true, h: h.deliver()},
	}
}

// idempotencyKey is the key of a submit: X-Idempotency-Key, else
// X-Request-ID, always in the caller's own namespace api:{actor}:{id}
// (docs/spec.md#idempotency: an API call's key includes the authenticated
// client id, which is the actor). A value that already starts with
// api:{actor}: is kept as it is. Any other value, one naming another client
// (api:admin:...) or another source's scheme (scheduler:, github:, slack:)
// included, is an id inside the caller's namespace: an API caller cannot
// occupy, probe or block another client's or source's key.
func idempotencyKey(r *http.Request, actor lifecycle.Actor) string {
	id := r.Header.Get(wire.IdempotencyKeyHeader)
	if id == "" {
		id = r.Header.Get(wire.RequestIDHeader)
	}
	if id == "" {
		return ""
	}
	own := "api:" + string(actor) + ":"
	if strings.HasPrefix(id, own) {
		return id
	}
	return own + id
}

func (h *runRoutes) submitRun(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
	data, err := readBody(r)
	if err != nil {
		return err
	}
	b, err := decodeSubmit(data)
	if err != nil {
		return err
	}
	if !h.slugs[b.AgentSlug] {
		return apiErr(codes.AgentNotFound, "no agent %q", b.AgentSlug)
	}
	res, err := h.runner.Submit(r.Context(), lifecycle.SubmitRequest{
		AgentSlug: b.AgentSlug, Trigger: b.Trigger, Source: b.Source, Input: b.Input,
		IdempotencyKey: idempotencyKey(r, actor),
		Caller:         lifecycle.Caller{UserID: b.UserID, Metadata: b.Metadata},
	})
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if res.Duplicate {
		status = http.StatusOK
	}
	return writeJSON(w, status, wire.SubmitAnswer{RunID: res.RunID, Duplicate: res.Duplicate})
}

func (h *runRoutes) listAgents(w http.ResponseWriter, _ *http.Request, _ lifecycle.Actor) error {
	return writeJSON(w, http.StatusOK, h.agents)
}

// pathID reads and checks an id of the path, before the SDK sees it.
func pathID(r *http.Request, name, field string) (string, error) {
	id := r.PathValue(name)
	return id, storekey.ValidateID(field, id)
}

func (h *runRoutes) runStatus() handlerFunc {
	return jsonRoute(http.StatusOK, pathParam("runId", "run_id"), func(ctx context.Context, _ lifecycle.Actor, id string) (lifecycle.RunStatus, error) {
		return h.runner.Status(ctx, id)
	})
}

// runInput is GET /runs/{runId}/input: what every step of the run is
// given, for the run page.
func (h *runRoutes) runInput() handlerFunc {
	return jsonRoute(http.StatusOK, pathParam("runId", "run_id"), func(ctx context.Context, _ lifecycle.Actor, id string) (wire.RunInputAnswer, error) {
		in, err := h.runner.Input(ctx, id)
		if in == nil {
			in = json.RawMessage("null")
		}
		return wire.RunInputAnswer{RunID: id, Input: in}, err
	})
}

func (h *runRoutes) runSteps() handlerFunc {
	return jsonRoute(http.StatusOK, pathParam("runId", "run_id"), func(ctx context.Context, _ lifecycle.Actor, id string) ([]lifecycle.StepRecord, error) {
		steps, err := h.runner.AllSteps(ctx, id)
		if err == nil && steps == nil {
			steps = []lifecycle.StepRecord{}
		}
		return steps, err
	})
}

// runsQuery reads GET /runs's filters: ?agent={slug}, ?status= and
// ?repo={owner/name}, each optional (no agent: the runs of every agent
// this Worker serves; a repo: that repository's runs, newest first).
func runsQuery(r *http.Request, _ lifecycle.Actor) (run.RunQuery, error) {
	q := r.URL.Query()
	rq := run.RunQuery{Agent: q.Get("agent"), Status: q.Get("status"), Tenant: q.Get("tenant"), Repo: q.Get("repo")}
	if rq.Tenant != "" {
		// Read by an operator of every tenant only (run.RunQuery).
		if err := storekey.ValidateID("tenant", rq.Tenant); err != nil {
			return rq, err
		}
	}
	if rq.Agent != "" {
		if err := storekey.ValidateID("agent", rq.Agent); err != nil {
			return rq, err
		}
	}
	if rq.Status != "" {
		if err := storekey.ValidateID("status", rq.Status); err != nil {
			return rq, apiErr(codes.InvalidRequest, "unknown status %q", rq.Status)
		}
	}
	return rq, nil
}

func (h *runRoutes) listRuns() handlerFunc {
	return pagedRoute(h.cursors, runsQuery, func(ctx context.Context, _ lifecycle.Actor, q run.RunQuery, p pageParams) ([]lifecycle.RunStatus, string, error) {
		q.Limit, q.Cursor = p.limit, p.cursor
		page, err := h.runner.ListRuns(ctx, q)
		if err != nil {
			return nil, "", err
		}
		// The runs of an agent no longer configured are still history; only an
		// agent with neither a definition nor a run is unknown.
		if q.Agent != "" && q.Repo == "" && q.Status == "" && q.Cursor == "" && len(page.Runs) == 0 && !h.slugs[q.Agent] {
			return nil, "", apiErr(codes.AgentNotFound, "no agent %q", q.Agent)
		}
		return page.Runs, page.Next, nil
	})
}

func (h *runRoutes) cancelRun() handlerFunc {
	return jsonRoute(http.StatusOK, pathBody("runId", "run_id", optionalBody[wire.CancelBody]),
		func(ctx context.Context, actor lifecycle.Actor, in idBody[wire.CancelBody]) (lifecycle.RunStatus, error) {
			return h.runner.Cancel(ctx, in.id, actor, run.CancelRequest{Reason: in.body.Reason})
		})
}

// decide serves approve (true) and reject (false). decided_by defaults to
// the actor.
func (h *runRoutes) decide(approve bool) handlerFunc {
	return jsonRoute(http.StatusOK, pathBody("runId", "run_id", optionalBody[wire.DecisionBody]),
		func(ctx context.Context, actor lifecycle.Actor, in idBody[wire.DecisionBody]) (lifecycle.RunStatus, error) {
			if in.body.DecidedBy == "" {
				in.body.DecidedBy = string(actor)
			}
			dec := run.Decision{DecidedBy: in.body.DecidedBy, Reason: in.body.Reason, Payload: in.body.Payload}
			if approve {
				return h.runner.Approve(ctx, in.id, actor, dec)
			}
			return h.runner.Reject(ctx, in.id, actor, dec)
		})
}

func (h *runRoutes) deliver() handlerFunc {
	return jsonRoute(http.StatusOK, pathBody("runId", "run_id", decodeEvent),
		func(ctx context.Context, actor lifecycle.Actor, in idBody[wire.EventBody]) (lifecycle.RunStatus, error) {
			return h.runner.Deliver(ctx, in.id, actor, run.ExternalEvent{Type: in.body.Type, ID: in.body.ID, Source: in.body.Source, Payload: in.body.Payload})
		})
}
