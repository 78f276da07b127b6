package httpapi

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/lifecycle/run/schedule"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// RequestIDHeader is the idempotency key of a submit without
// X-Idempotency-Key (client.IdempotencyKeyHeader; docs/spec.md#idempotency).
const RequestIDHeader = "X-Request-ID"

// idempotencyKey is the key of a submit: X-Idempotency-Key, else
// X-Request-ID, always in the caller's own namespace api:{actor}:{id}
// (docs/spec.md#idempotency: an API call's key includes the authenticated
// client id, which is the actor). A value that already starts with
// api:{actor}: is kept as it is. Any other value, one naming another client
// (api:admin:...) or another source's scheme (scheduler:, github:, slack:)
// included, is an id inside the caller's namespace: an API caller cannot
// occupy, probe or block another client's or source's key.
func idempotencyKey(r *http.Request, actor lifecycle.Actor) string {
	id := r.Header.Get(client.IdempotencyKeyHeader)
	if id == "" {
		id = r.Header.Get(RequestIDHeader)
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

func (s *Server) submitRun(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
	data, err := readBody(r)
	if err != nil {
		return err
	}
	b, err := decodeSubmit(data)
	if err != nil {
		return err
	}
	if !s.slugs[b.AgentSlug] {
		return apiErr(codes.AgentNotFound, "no agent %q", b.AgentSlug)
	}
	res, err := s.cfg.Runner.Submit(r.Context(), run.SubmitRequest{
		AgentSlug: b.AgentSlug, Trigger: b.Trigger, Input: b.Input,
		IdempotencyKey: idempotencyKey(r, actor),
		Caller:         run.Caller{UserID: b.UserID, Metadata: b.Metadata},
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

func (s *Server) listAgents(w http.ResponseWriter, _ *http.Request, _ lifecycle.Actor) error {
	return writeJSON(w, http.StatusOK, s.agents)
}

// pathID reads and checks an id of the path, before the SDK sees it.
func pathID(r *http.Request, name, field string) (string, error) {
	id := r.PathValue(name)
	return id, storage.ValidateID(field, id)
}

func (s *Server) runStatus() handlerFunc {
	return jsonRoute(http.StatusOK, pathParam("runId", "run_id"), func(ctx context.Context, _ lifecycle.Actor, id string) (run.Status, error) {
		return s.cfg.Runner.Status(ctx, id)
	})
}

func (s *Server) runSteps() handlerFunc {
	return jsonRoute(http.StatusOK, pathParam("runId", "run_id"), func(ctx context.Context, _ lifecycle.Actor, id string) ([]run.StepRecord, error) {
		steps, err := s.cfg.Runner.Steps(ctx, id)
		if err == nil && steps == nil {
			steps = []run.StepRecord{}
		}
		return steps, err
	})
}

// runsQuery reads GET /runs's filters: ?agent={slug} and ?status=, both
// optional (no agent: the runs of every agent this Worker serves).
func runsQuery(r *http.Request, _ lifecycle.Actor) (run.RunQuery, error) {
	q := r.URL.Query()
	rq := run.RunQuery{Agent: q.Get("agent"), Status: q.Get("status")}
	if rq.Agent != "" {
		if err := storage.ValidateID("agent", rq.Agent); err != nil {
			return rq, err
		}
	}
	if rq.Status != "" {
		if err := storage.ValidateID("status", rq.Status); err != nil {
			return rq, apiErr(codes.InvalidRequest, "unknown status %q", rq.Status)
		}
	}
	return rq, nil
}

func (s *Server) listRuns() handlerFunc {
	return pagedRoute(s.cursors, runsQuery, func(ctx context.Context, _ lifecycle.Actor, q run.RunQuery, p pageParams) ([]run.Status, string, error) {
		q.Limit, q.Cursor = p.limit, p.cursor
		page, err := s.cfg.Runner.ListRuns(ctx, q)
		if err != nil {
			return nil, "", err
		}
		// The runs of an agent no longer configured are still history; only an
		// agent with neither a definition nor a run is unknown.
		if q.Agent != "" && q.Status == "" && q.Cursor == "" && len(page.Runs) == 0 && !s.slugs[q.Agent] {
			return nil, "", apiErr(codes.AgentNotFound, "no agent %q", q.Agent)
		}
		return page.Runs, page.Next, nil
	})
}

func (s *Server) cancelRun() handlerFunc {
	return jsonRoute(http.StatusOK, pathBody("runId", "run_id", optionalBody[wire.CancelBody]),
		func(ctx context.Context, actor lifecycle.Actor, in idBody[wire.CancelBody]) (run.Status, error) {
			return s.cfg.Runner.Cancel(ctx, in.id, actor, run.CancelRequest{Reason: in.body.Reason})
		})
}

// decide serves approve (true) and reject (false). decided_by defaults to
// the actor.
func (s *Server) decide(approve bool) handlerFunc {
	return jsonRoute(http.StatusOK, pathBody("runId", "run_id", optionalBody[wire.DecisionBody]),
		func(ctx context.Context, actor lifecycle.Actor, in idBody[wire.DecisionBody]) (run.Status, error) {
			if in.body.DecidedBy == "" {
				in.body.DecidedBy = string(actor)
			}
			dec := run.Decision{DecidedBy: in.body.DecidedBy, Reason: in.body.Reason}
			if approve {
				return s.cfg.Runner.Approve(ctx, in.id, actor, dec)
			}
			return s.cfg.Runner.Reject(ctx, in.id, actor, dec)
		})
}

func (s *Server) deliver() handlerFunc {
	return jsonRoute(http.StatusOK, pathBody("runId", "run_id", decodeEvent),
		func(ctx context.Context, actor lifecycle.Actor, in idBody[wire.EventBody]) (run.Status, error) {
			return s.cfg.Runner.Deliver(ctx, in.id, actor, run.ExternalEvent{Type: in.body.Type, ID: in.body.ID, Source: in.body.Source})
		})
}

func absent(what string) error {
	return apiErr(codes.NotFound, "this worker serves no %s", what)
}

func (s *Server) enqueueJob() handlerFunc {
	return needs(s.cfg.Queue != nil, "job queue", jsonRoute(http.StatusCreated, jsonBody(decodeJob),
		func(ctx context.Context, actor lifecycle.Actor, n jobqueue.NewJob) (lifecycle.Job, error) {
			job, err := s.cfg.Queue.Enqueue(ctx, actor, n)
			return job, jobScoped(err)
		}))
}

// jobsQuery reads GET /jobs's filters: ?status=, ?type=, ?agent=.
func jobsQuery(r *http.Request, _ lifecycle.Actor) (jobqueue.JobQuery, error) {
	q := r.URL.Query()
	jq := jobqueue.JobQuery{Status: lifecycle.JobState(q.Get("status")), Type: lifecycle.JobType(q.Get("type")), Agent: q.Get("agent")}
	if jq.Agent != "" {
		if err := storage.ValidateID("agent", jq.Agent); err != nil {
			return jq, err
		}
	}
	return jq, nil
}

func (s *Server) listJobs() handlerFunc {
	return needs(s.cfg.Queue != nil, "job queue", pagedRoute(s.cursors, jobsQuery,
		func(ctx context.Context, actor lifecycle.Actor, jq jobqueue.JobQuery, p pageParams) ([]lifecycle.Job, string, error) {
			jq.Limit, jq.Cursor = p.limit, p.cursor
			page, err := s.cfg.Queue.ListPage(ctx, actor, jq)
			if err != nil {
				return nil, "", jobScoped(err)
			}
			return page.Jobs, page.Next, nil
		}))
}

func (s *Server) getJob() handlerFunc {
	return needs(s.cfg.Queue != nil, "job queue", jsonRoute(http.StatusOK, pathParam("jobId", "job_id"),
		func(ctx context.Context, actor lifecycle.Actor, id string) (lifecycle.Job, error) {
			job, err := s.cfg.Queue.Get(ctx, actor, id)
			return job, jobScoped(err)
		}))
}

func (s *Server) requeueJob() handlerFunc {
	return needs(s.cfg.Queue != nil, "job queue", jsonRoute(http.StatusOK, pathNoBody("jobId", "job_id", "requeue takes no body"),
		func(ctx context.Context, actor lifecycle.Actor, id string) (lifecycle.Job, error) {
			job, err := s.cfg.Queue.Requeue(ctx, actor, id)
			return job, jobScoped(err)
		}))
}

// nlmCallback checks the body as strictly as every other route, then hands
// it to nlm.Sink; the Sink's plain-text refusals become the JSON form.
func (s *Server) nlmCallback(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	if s.sink == nil {
		return absent("NLM processor")
	}
	data, err := readBody(r)
	if err != nil {
		return err
	}
	if _, err := decodeCallback(data); err != nil {
		return err
	}
	r2 := r.Clone(r.Context())
	r2.Body, r2.ContentLength = readCloser{bytes.NewReader(data)}, int64(len(data))
	cw := &captureWriter{header: http.Header{}}
	s.sink.ServeHTTP(cw, r2)
	if cw.status == 0 || cw.status < 400 {
		w.WriteHeader(max(cw.status, http.StatusNoContent))
		return nil
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(cw.body.String()), "\n")
	code := codes.OfStatus(cw.status)
	if cw.status == http.StatusNotFound {
		code = codes.JobNotFound
	}
	if codes.HTTPStatus(code) != cw.status {
		code = codes.InternalError
	}
	return apiErr(code, "%s", msg)
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// captureWriter holds nlm.Sink's answer.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(s int) {
	if c.status == 0 {
		c.status = s
	}
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.body.Len() < 4096 {
		c.body.Write(b)
	}
	return len(b), nil
}

func (s *Server) submitInbox() handlerFunc {
	return needs(s.cfg.Inbox != nil, "inbox", jsonRoute(http.StatusCreated, jsonBody(decodeSubmission),
		func(ctx context.Context, _ lifecycle.Actor, sub lifecycle.InboxSubmission) (wire.InboxAnswer, error) {
			// The route admits the owner's callers; the Worker, the gateway, is who
			// writes a pending entry (docs/spec.md#inbox-entry-lifecycle).
			e, err := s.cfg.Inbox.Submit(ctx, lifecycle.ActorGateway, sub)
			if err != nil {
				return wire.InboxAnswer{}, err
			}
			return wire.InboxAnswer{InboxID: e.ID, Status: e.Status}, nil
		}))
}

func (s *Server) inboxStats() handlerFunc {
	return needs(s.cfg.Inbox != nil, "inbox", jsonRoute(http.StatusOK, noInput,
		func(ctx context.Context, _ lifecycle.Actor, _ struct{}) (lifecycle.InboxStats, error) {
			return s.cfg.Inbox.Stats(ctx)
		}))
}

// statusQuery reads GET /inbox/entries's optional ?status= filter.
func statusQuery(r *http.Request, _ lifecycle.Actor) (inbox.ListOptions, error) {
	var opts inbox.ListOptions
	if v := r.URL.Query().Get("status"); v != "" {
		known := false
		for _, st := range lifecycle.InboxStates() {
			known = known || string(st) == v
		}
		if !known {
			return opts, apiErr(codes.InvalidRequest, "unknown status %q (want pending, processed, rejected or expired)", v)
		}
		opts.Status = lifecycle.InboxState(v)
	}
	return opts, nil
}

func (s *Server) inboxEntries() handlerFunc {
	return needs(s.cfg.Inbox != nil, "inbox", pagedRoute(s.cursors, statusQuery,
		func(ctx context.Context, _ lifecycle.Actor, opts inbox.ListOptions, p pageParams) ([]lifecycle.InboxEntry, string, error) {
			page, err := s.cfg.Inbox.ListPage(ctx, opts, p.limit, p.cursor)
			return page.Entries, page.Next, err
		}))
}

func (s *Server) listQuarantine() handlerFunc {
	return needs(s.cfg.Store != nil, "store for quarantine", pagedRoute(s.cursors, noInput,
		func(ctx context.Context, _ lifecycle.Actor, _ struct{}, p pageParams) ([]wire.Quarantined, string, error) {
			limit, err := core.PageLimit(p.limit)
			if err != nil {
				return nil, "", err
			}
			after, err := core.PageCursor(p.cursor, nil)
			if err != nil {
				return nil, "", err
			}
			// In key order from the cursor; a record restored meanwhile is skipped.
			return core.ReadPage(ctx, s.cfg.Store, []string{records.QuarantinePrefix}, after, limit, 0,
				func(ctx context.Context, _ int, entry string) (wire.Quarantined, bool, error) {
					q, err := records.ReadQuarantined(ctx, s.cfg.Store, records.QuarantinePrefix+entry)
					if errors.Is(err, storage.ErrNotFound) {
						return wire.Quarantined{}, false, nil
					}
					return wire.Quarantined{QKey: q.QKey, Quarantined: q}, err == nil, err
				})
		}))
}

func (s *Server) restoreQuarantined(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	if s.cfg.Store == nil {
		return absent("store for quarantine")
	}
	data, err := readBody(r)
	if err != nil {
		return err
	}
	b, err := decodeRestore(data)
	if err != nil {
		return err
	}
	q, err := records.ReadQuarantined(r.Context(), s.cfg.Store, b.QKey)
	if err != nil {
		return err
	}
	if err := records.Restore(r.Context(), s.cfg.Store, b.QKey, q.Data); err != nil {
		if errors.Is(err, storage.ErrPreconditionFailed) {
			return apiErr(codes.Conflict, "%s: the original key was written since, or a quarantine is in progress: %v", b.QKey, err)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listSchedules() handlerFunc {
	return needs(s.cfg.Schedules != nil, "scheduler", jsonRoute(http.StatusOK, noInput,
		func(ctx context.Context, _ lifecycle.Actor, _ struct{}) ([]schedule.Info, error) {
			return s.cfg.Schedules.List(ctx)
		}))
}

// pauseSchedule pauses or resumes a schedule, in every process sharing the
// store; the actor is recorded as who paused it.
func (s *Server) pauseSchedule(pause bool) handlerFunc {
	return needs(s.cfg.Schedules != nil, "scheduler", jsonRoute(http.StatusOK, pathNoBody("scheduleId", "schedule_id", "pause and resume take no body"),
		func(ctx context.Context, actor lifecycle.Actor, id string) (schedule.Info, error) {
			var info schedule.Info
			var err error
			if pause {
				info, err = s.cfg.Schedules.Pause(ctx, id, string(actor))
			} else {
				info, err = s.cfg.Schedules.Resume(ctx, id)
			}
			if errors.Is(err, schedule.ErrUnknownSchedule) {
				return info, apiErr(codes.NotFound, "no schedule %q", id)
			}
			return info, err
		}))
}
