package httpapi

import (
	"bytes"
	"errors"
	"net/http"
	"strings"

	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/lifecycle/run/schedule"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// Idempotency headers of POST /agents/run (seed 004 §3.2).
const (
	IdempotencyKeyHeader = "X-Idempotency-Key"
	RequestIDHeader      = "X-Request-ID"
)

// submitAnswer is POST /agents/run's answer.
type submitAnswer struct {
	RunID     string `json:"run_id"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// inboxAnswer is POST /inbox/submit's answer.
type inboxAnswer struct {
	InboxID string               `json:"inbox_id"`
	Status  lifecycle.InboxState `json:"status"`
}

// quarantinedJSON is one record of GET /quarantine: records.Quarantined
// with its qkey, which its own JSON leaves out.
type quarantinedJSON struct {
	QKey string `json:"qkey"`
	records.Quarantined
}

// idempotencyKey is the key of a submit: X-Idempotency-Key, else
// X-Request-ID, always in the caller's own namespace api:{actor}:{id} (seed
// 004 §3.2: an API call's key is "combined with authenticated client ID";
// the actor is the seed's client id). A value that already starts with
// api:{actor}: is kept as it is. Any other value, one naming another client
// (api:admin:...) or another source's scheme (scheduler:, github:, slack:)
// included, is an id inside the caller's namespace: an API caller cannot
// occupy, probe or block another client's or source's key.
func idempotencyKey(r *http.Request, actor lifecycle.Actor) string {
	id := r.Header.Get(IdempotencyKeyHeader)
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
	return writeJSON(w, status, submitAnswer{RunID: res.RunID, Duplicate: res.Duplicate})
}

func (s *Server) listAgents(w http.ResponseWriter, _ *http.Request, _ lifecycle.Actor) error {
	return writeJSON(w, http.StatusOK, s.agents)
}

// pathID reads and checks an id of the path, before the SDK sees it.
func pathID(r *http.Request, name, field string) (string, error) {
	id := r.PathValue(name)
	return id, storage.ValidateID(field, id)
}

func (s *Server) runStatus(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	id, err := pathID(r, "runId", "run_id")
	if err != nil {
		return err
	}
	st, err := s.cfg.Runner.Status(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

func (s *Server) runSteps(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	id, err := pathID(r, "runId", "run_id")
	if err != nil {
		return err
	}
	steps, err := s.cfg.Runner.Steps(r.Context(), id)
	if err != nil {
		return err
	}
	if steps == nil {
		steps = []run.StepRecord{}
	}
	return writeJSON(w, http.StatusOK, steps)
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	slug := r.URL.Query().Get("agent")
	if slug == "" {
		return apiErr(codes.InvalidRequest, "the agent query parameter is required (GET /runs?agent={slug})")
	}
	if err := storage.ValidateID("agent", slug); err != nil {
		return err
	}
	runs, err := s.cfg.Runner.Runs(r.Context(), slug)
	if err != nil {
		return err
	}
	// The runs of an agent no longer configured are still history; only an
	// agent with neither a definition nor a run is unknown.
	if len(runs) == 0 && !s.slugs[slug] {
		return apiErr(codes.AgentNotFound, "no agent %q", slug)
	}
	if runs == nil {
		runs = []run.Status{}
	}
	return writeJSON(w, http.StatusOK, runs)
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
	id, err := pathID(r, "runId", "run_id")
	if err != nil {
		return err
	}
	data, err := readBody(r)
	if err != nil {
		return err
	}
	var b cancelBody
	if err := decodeStrict(data, &b, true); err != nil {
		return err
	}
	st, err := s.cfg.Runner.Cancel(r.Context(), id, actor, run.CancelRequest{Reason: b.Reason})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

// decide serves approve (true) and reject (false). decided_by defaults to
// the actor.
func (s *Server) decide(approve bool) func(http.ResponseWriter, *http.Request, lifecycle.Actor) error {
	return func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
		id, err := pathID(r, "runId", "run_id")
		if err != nil {
			return err
		}
		data, err := readBody(r)
		if err != nil {
			return err
		}
		var b decisionBody
		if err := decodeStrict(data, &b, true); err != nil {
			return err
		}
		if b.DecidedBy == "" {
			b.DecidedBy = string(actor)
		}
		dec := run.Decision{DecidedBy: b.DecidedBy, Reason: b.Reason}
		var st run.Status
		if approve {
			st, err = s.cfg.Runner.Approve(r.Context(), id, actor, dec)
		} else {
			st, err = s.cfg.Runner.Reject(r.Context(), id, actor, dec)
		}
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, st)
	}
}

func (s *Server) deliver(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
	id, err := pathID(r, "runId", "run_id")
	if err != nil {
		return err
	}
	data, err := readBody(r)
	if err != nil {
		return err
	}
	b, err := decodeEvent(data)
	if err != nil {
		return err
	}
	st, err := s.cfg.Runner.Deliver(r.Context(), id, actor, run.ExternalEvent{Type: b.Type, ID: b.ID, Source: b.Source})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

func absent(what string) error {
	return apiErr(codes.NotFound, "this worker serves no %s", what)
}

func (s *Server) enqueueJob(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
	if s.cfg.Queue == nil {
		return absent("job queue")
	}
	data, err := readBody(r)
	if err != nil {
		return err
	}
	n, err := decodeJob(data)
	if err != nil {
		return err
	}
	job, err := s.cfg.Queue.Enqueue(r.Context(), actor, n)
	if err != nil {
		return jobScoped(err)
	}
	return writeJSON(w, http.StatusCreated, job)
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
	if s.cfg.Queue == nil {
		return absent("job queue")
	}
	jobs := []lifecycle.Job{}
	for j, err := range s.cfg.Queue.List(r.Context(), actor) {
		if err != nil {
			return jobScoped(err)
		}
		jobs = append(jobs, j)
	}
	return writeJSON(w, http.StatusOK, jobs)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
	if s.cfg.Queue == nil {
		return absent("job queue")
	}
	id, err := pathID(r, "jobId", "job_id")
	if err != nil {
		return err
	}
	job, err := s.cfg.Queue.Get(r.Context(), actor, id)
	if err != nil {
		return jobScoped(err)
	}
	return writeJSON(w, http.StatusOK, job)
}

func (s *Server) requeueJob(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
	if s.cfg.Queue == nil {
		return absent("job queue")
	}
	id, err := pathID(r, "jobId", "job_id")
	if err != nil {
		return err
	}
	if r.ContentLength > 0 {
		return apiErr(codes.InvalidRequest, "requeue takes no body")
	}
	job, err := s.cfg.Queue.Requeue(r.Context(), actor, id)
	if err != nil {
		return jobScoped(err)
	}
	return writeJSON(w, http.StatusOK, job)
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
	code := codeOfStatus(cw.status)
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

func (s *Server) submitInbox(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	if s.cfg.Inbox == nil {
		return absent("inbox")
	}
	data, err := readBody(r)
	if err != nil {
		return err
	}
	sub, err := decodeSubmission(data)
	if err != nil {
		return err
	}
	// The route admits the owner's callers; the Worker, the gateway, is who
	// writes a pending entry (seed 002 §1.2).
	e, err := s.cfg.Inbox.Submit(r.Context(), lifecycle.ActorGateway, sub)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, inboxAnswer{InboxID: e.ID, Status: e.Status})
}

func (s *Server) inboxStats(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	if s.cfg.Inbox == nil {
		return absent("inbox")
	}
	st, err := s.cfg.Inbox.Stats(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

func (s *Server) inboxEntries(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	if s.cfg.Inbox == nil {
		return absent("inbox")
	}
	var opts inbox.ListOptions
	if v := r.URL.Query().Get("status"); v != "" {
		known := false
		for _, st := range lifecycle.InboxStates() {
			known = known || string(st) == v
		}
		if !known {
			return apiErr(codes.InvalidRequest, "unknown status %q (want pending, processed, rejected or expired)", v)
		}
		opts.Status = lifecycle.InboxState(v)
	}
	entries := []lifecycle.InboxEntry{}
	for e, err := range s.cfg.Inbox.List(r.Context(), opts) {
		if err != nil {
			return err
		}
		entries = append(entries, e)
	}
	return writeJSON(w, http.StatusOK, entries)
}

func (s *Server) listQuarantine(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	if s.cfg.Store == nil {
		return absent("store for quarantine")
	}
	out := []quarantinedJSON{}
	for q, err := range records.ListQuarantine(r.Context(), s.cfg.Store) {
		if err != nil {
			return err
		}
		out = append(out, quarantinedJSON{QKey: q.QKey, Quarantined: q})
	}
	return writeJSON(w, http.StatusOK, out)
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

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	if s.cfg.Schedules == nil {
		return absent("scheduler")
	}
	infos, err := s.cfg.Schedules.List(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, infos)
}

// pauseSchedule pauses or resumes a schedule, in every process sharing the
// store; the actor is recorded as who paused it.
func (s *Server) pauseSchedule(pause bool) func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
	return func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
		if s.cfg.Schedules == nil {
			return absent("scheduler")
		}
		id, err := pathID(r, "scheduleId", "schedule_id")
		if err != nil {
			return err
		}
		if r.ContentLength > 0 {
			return apiErr(codes.InvalidRequest, "pause and resume take no body")
		}
		var info schedule.Info
		if pause {
			info, err = s.cfg.Schedules.Pause(r.Context(), id, string(actor))
		} else {
			info, err = s.cfg.Schedules.Resume(r.Context(), id)
		}
		if errors.Is(err, schedule.ErrUnknownSchedule) {
			return apiErr(codes.NotFound, "no schedule %q", id)
		}
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, info)
	}
}
