package jobqueue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// NLMRequest is what the orchestration layer posts to the NLM backend
// (POST /jobs/process, seed 003 §2).
type NLMRequest struct {
	JobID     string  `json:"job_id"`
	RunID     string  `json:"run_id,omitempty"`
	JobType   JobType `json:"job_type"`
	AgentSlug string  `json:"agent_slug"`
	// ContextSnapshotURL is where FETCHING_CONTEXT loads the context from.
	ContextSnapshotURL string `json:"context_snapshot_url,omitempty"`
	// Query is what to ask NotebookLM: at most lifecycle.MaxDocumentBytes
	// of UTF-8 text. The URLs are at most lifecycle.MaxURLBytes.
	Query string `json:"query,omitempty"`
	// Callback is the URL the result is posted to (http or https).
	Callback string `json:"callback"`
	// ProjectID is the artifact's cid; empty means NLMConfig.Project.
	ProjectID string `json:"project_id,omitempty"`
}

// CallbackBody is the body posted to the callback URL: status COMPLETE with
// the artifact id, or FAILED with the error (seed 003 §2).
type CallbackBody struct {
	JobID      string `json:"job_id"`
	Status     string `json:"status"` // CallbackComplete or CallbackFailed
	ArtifactID string `json:"artifact_id,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Callback statuses.
const (
	CallbackComplete = "COMPLETE"
	CallbackFailed   = "FAILED"
)

// NLMSteps are the NLM backend's pipeline steps, supplied by the service.
// Each is optional except Query; a nil step passes its input on.
type NLMSteps struct {
	// FetchContext is FETCHING_CONTEXT: load the context snapshot.
	FetchContext func(ctx context.Context, req NLMRequest) (json.RawMessage, error)
	// BuildPrompt is BUILDING_PROMPT: the prompt from context and query.
	BuildPrompt func(ctx context.Context, req NLMRequest, snapshot json.RawMessage) (string, error)
	// Query is NLM_QUERY: the HTTP call to NotebookLM. Required.
	Query func(ctx context.Context, req NLMRequest, prompt string) (json.RawMessage, error)
	// Structure is STRUCTURING: parse the answer into artifact content.
	// Nil means the answer is the content.
	Structure func(ctx context.Context, req NLMRequest, answer json.RawMessage) (Output, error)
}

// Poster posts a callback; *http.Client is one.
type Poster interface {
	Do(req *http.Request) (*http.Response, error)
}

// NLMConfig configures an NLMProcessor.
type NLMConfig struct {
	// Store holds the NLM backend's job records (nlm/jobs/{job_id}.json),
	// the artifacts and the audit log. Required.
	Store storage.Store
	// Artifacts writes the artifacts. Default: an artifact.Store over Store.
	Artifacts *artifact.Store
	// Project is the cid of artifacts of requests without one. Default
	// DefaultProject.
	Project string
	// Client posts the callbacks. Default: an *http.Client with a 30 s
	// timeout.
	Client Poster
	// CallbackAttempts is how often a callback is tried before the job goes
	// to ERROR. Default 3.
	CallbackAttempts int
	// CallbackBackoff is the wait between callback attempts, doubling each
	// time. Default 1 s.
	CallbackBackoff time.Duration
	// Clock stamps records and times the callback retries. Default: the
	// wall clock.
	Clock clock.Clock
	// Node names this host in audit events.
	Node string
	// Logger receives audit write failures. Default: slog.Default().
	Logger *slog.Logger
}

// NLMProcessor is the NLM backend side of seed 003 §2: it accepts a job
// (ACCEPTED), runs FETCHING_CONTEXT → BUILDING_PROMPT → NLM_QUERY →
// STRUCTURING, writes the job's artifact, posts the callback with the
// artifact id (CALLBACK) and ends DONE; a failing step sends the job to
// ERROR and the callback says FAILED. Every move is the NLM backend's
// (the machine allows no one else) and is written with compare-and-swap
// and audited.
type NLMProcessor struct {
	cfg   NLMConfig
	steps NLMSteps
}

// NewNLMProcessor checks cfg and steps and returns a processor.
func NewNLMProcessor(cfg NLMConfig, steps NLMSteps) (*NLMProcessor, error) {
	if cfg.Store == nil || steps.Query == nil {
		return nil, errors.New("jobqueue: NLMConfig.Store and NLMSteps.Query are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Project == "" {
		cfg.Project = DefaultProject
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.CallbackAttempts <= 0 {
		cfg.CallbackAttempts = 3
	}
	if cfg.CallbackBackoff <= 0 {
		cfg.CallbackBackoff = time.Second
	}
	if cfg.Artifacts == nil {
		a, err := artifact.New(artifact.Config{Store: cfg.Store, Clock: cfg.Clock, Node: cfg.Node, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		cfg.Artifacts = a
	}
	return &NLMProcessor{cfg: cfg, steps: steps}, nil
}

// NLMJobKey is the NLM backend's record of a job: nlm/jobs/{job_id}.json.
func NLMJobKey(jobID string) (string, error) {
	if err := storage.ValidateID("job id", jobID); err != nil {
		return "", err
	}
	return "nlm/jobs/" + jobID + ".json", nil
}

type nlmDoc struct {
	storage.Meta
	NLMJob
}

func (r *NLMRequest) validate(defaultProject string) error {
	// Text first (issue 10 F), so nothing below quotes megabytes.
	if err := lifecycle.CheckText("query", r.Query, lifecycle.MaxDocumentBytes, lifecycle.MultiLine); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if err := lifecycle.CheckText("callback", r.Callback, lifecycle.MaxURLBytes, lifecycle.OneLine); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if err := lifecycle.CheckText("context_snapshot_url", r.ContextSnapshotURL, lifecycle.MaxURLBytes, lifecycle.OneLine); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	for _, id := range [][2]string{{"job id", r.JobID}, {"agent slug", r.AgentSlug}} {
		if err := storage.ValidateID(id[0], id[1]); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	if r.RunID != "" {
		if err := storage.ValidateID("run id", r.RunID); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	if r.ProjectID == "" {
		r.ProjectID = defaultProject
	}
	if err := storage.ValidateID("project id", r.ProjectID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if _, ok := ArtifactType(r.JobType); !ok {
		return badJob("job_type %q is not RESEARCH, BRIEF or PROPOSAL_PREPROCESS", r.JobType)
	}
	u, err := url.Parse(r.Callback)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return badJob("callback %q is not an http(s) URL", r.Callback)
	}
	return nil
}

// Accept registers req as an NLM job in ACCEPTED (the seed's 202). A
// second Accept of the same job id returns the job as it stands, without
// error. Invalid requests (ErrInvalidJob) write nothing.
func (p *NLMProcessor) Accept(ctx context.Context, req NLMRequest) (NLMJob, error) {
	if err := req.validate(p.cfg.Project); err != nil {
		return NLMJob{}, err
	}
	key, _ := NLMJobKey(req.JobID)
	now := p.cfg.Clock.Now().UTC()
	d := nlmDoc{NLMJob: NLMJob{JobID: req.JobID, Status: NLMAccepted, Request: &req, CreatedAt: now, UpdatedAt: now}}
	if _, err := storage.Create(ctx, p.cfg.Store, key, &d); err != nil {
		if errors.Is(err, storage.ErrPreconditionFailed) {
			cur, _, err := storage.Read[nlmDoc](ctx, p.cfg.Store, key)
			return cur.NLMJob, err
		}
		return NLMJob{}, err
	}
	p.record(ctx, &d, "")
	return d.NLMJob, nil
}

// Get reads the NLM backend's record of a job.
func (p *NLMProcessor) Get(ctx context.Context, jobID string) (NLMJob, error) {
	key, err := NLMJobKey(jobID)
	if err != nil {
		return NLMJob{}, err
	}
	d, _, err := storage.Read[nlmDoc](ctx, p.cfg.Store, key)
	return d.NLMJob, err
}

// record audits the write that brought d to its version, under an id
// that sorts by time and then by version (AuditEventID), so the moves of
// one job read back in order even at equal timestamps.
func (p *NLMProcessor) record(ctx context.Context, d *nlmDoc, from NLMJobState) {
	ev := storage.AuditEvent{TS: d.UpdatedAt, Event: "nlm.status.update", Actor: string(lifecycle.ActorNLMBackend),
		JobID: d.JobID, ArtifactID: d.ArtifactID, From: string(from), To: string(d.Status), Node: p.cfg.Node}
	key, err := storage.AuditKey(ev.TS, AuditEventID(ev.TS, "nlm/"+d.JobID, d.Version, 0))
	if err == nil {
		var b []byte
		if b, err = json.Marshal(ev); err == nil {
			_, err = p.cfg.Store.Put(ctx, key, b, storage.IfNotExists())
		}
	}
	if err != nil {
		p.cfg.Logger.ErrorContext(ctx, "jobqueue: NLM audit write failed", "job_id", d.JobID, "err", err)
	}
}

// fire moves the record by event, with set applied after.
func (p *NLMProcessor) fire(ctx context.Context, jobID string, event lifecycle.Event, set func(*NLMJob)) (NLMJob, error) {
	key, _ := NLMJobKey(jobID)
	var from NLMJobState
	d, _, err := storage.Update(ctx, p.cfg.Store, key, func(d *nlmDoc) error {
		from = d.Status
		if _, err := NLMJobMachine().Fire(ctx, &d.NLMJob, event, lifecycle.ActorNLMBackend); err != nil {
			return err
		}
		if now := p.cfg.Clock.Now().UTC(); now.After(d.UpdatedAt) {
			d.UpdatedAt = now
		}
		if set != nil {
			set(&d.NLMJob)
		}
		return nil
	})
	if err != nil {
		return NLMJob{}, err
	}
	p.record(ctx, &d, from)
	return d.NLMJob, nil
}

// Process runs an accepted job to DONE or ERROR and posts the callback.
// It returns the job as it ended; an error means the record itself could
// not be written (or the job was not in ACCEPTED), not that the job
// failed.
func (p *NLMProcessor) Process(ctx context.Context, jobID string) (NLMJob, error) {
	job, err := p.Get(ctx, jobID)
	if err != nil {
		return NLMJob{}, err
	}
	if job.Request == nil {
		return job, fmt.Errorf("%w: NLM job %s has no request", ErrInvalidJob, jobID)
	}
	req := *job.Request
	if _, err := p.fire(ctx, jobID, EventFetchContext, nil); err != nil {
		return job, err
	}
	fail := func(step string, cause error) (NLMJob, error) {
		msg := step + ": " + cause.Error()
		j, err := p.fire(context.WithoutCancel(ctx), jobID, EventError, func(j *NLMJob) { j.Error = msg })
		if err != nil {
			return j, err
		}
		if perr := p.post(ctx, req.Callback, CallbackBody{JobID: jobID, Status: CallbackFailed, Error: msg}); perr != nil {
			p.cfg.Logger.WarnContext(ctx, "jobqueue: FAILED callback not delivered", "job_id", jobID, "err", perr)
		}
		return j, nil
	}
	var snapshot json.RawMessage
	if p.steps.FetchContext != nil {
		if snapshot, err = p.steps.FetchContext(ctx, req); err != nil {
			return fail("FETCHING_CONTEXT", err)
		}
	}
	if _, err := p.fire(ctx, jobID, EventContextFetched, nil); err != nil {
		return job, err
	}
	prompt := req.Query
	if p.steps.BuildPrompt != nil {
		if prompt, err = p.steps.BuildPrompt(ctx, req, snapshot); err != nil {
			return fail("BUILDING_PROMPT", err)
		}
	}
	if _, err := p.fire(ctx, jobID, EventPromptBuilt, nil); err != nil {
		return job, err
	}
	answer, err := p.steps.Query(ctx, req, prompt)
	if err != nil {
		return fail("NLM_QUERY", err)
	}
	if _, err := p.fire(ctx, jobID, EventResponseReceived, nil); err != nil {
		return job, err
	}
	out := Output{Content: answer}
	if p.steps.Structure != nil {
		if out, err = p.steps.Structure(ctx, req, answer); err != nil {
			return fail("STRUCTURING", err)
		}
	}
	typ, _ := ArtifactType(req.JobType)
	art, _, err := p.cfg.Artifacts.Create(ctx, lifecycle.ActorNLMBackend, req.ProjectID, artifact.Draft{
		JobID: req.JobID, RunID: req.RunID, Type: typ, AgentSlug: req.AgentSlug,
		EntityRefs: out.EntityRefs, Tags: out.Tags, Content: out.Content, Sources: out.Sources,
	})
	if err != nil {
		return fail("STRUCTURING", err)
	}
	if _, err := p.fire(ctx, jobID, EventStructured, func(j *NLMJob) { j.ArtifactID = art.ArtifactID }); err != nil {
		return job, err
	}
	if err := p.post(ctx, req.Callback, CallbackBody{JobID: jobID, Status: CallbackComplete, ArtifactID: art.ArtifactID}); err != nil {
		msg := "CALLBACK: " + err.Error()
		return p.fire(context.WithoutCancel(ctx), jobID, EventError, func(j *NLMJob) { j.Error = msg })
	}
	return p.fire(ctx, jobID, EventCallbackSent, nil)
}

// Handle is Accept then Process.
func (p *NLMProcessor) Handle(ctx context.Context, req NLMRequest) (NLMJob, error) {
	if _, err := p.Accept(ctx, req); err != nil {
		return NLMJob{}, err
	}
	return p.Process(ctx, req.JobID)
}

// post delivers cb, trying CallbackAttempts times with doubling waits; a
// 2xx answer is delivery.
func (p *NLMProcessor) post(ctx context.Context, target string, cb CallbackBody) error {
	body, err := json.Marshal(cb)
	if err != nil {
		return err
	}
	wait := p.cfg.CallbackBackoff
	var last error
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := p.cfg.Client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			err = &StatusError{Code: resp.StatusCode}
		}
		last = err
		if attempt >= p.cfg.CallbackAttempts {
			return fmt.Errorf("callback to %s failed %d times: %w", target, attempt, last)
		}
		t := p.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
		wait *= 2
	}
}
