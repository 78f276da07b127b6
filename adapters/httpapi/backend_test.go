package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

const briefJSON = `{"title":"Brief","body":"Short text","entity_map":{"violin":"Violin"},"word_count":2}`

// tokenPoster posts the NLM backend's callbacks with a bearer token.
type tokenPoster struct{ token string }

func (p tokenPoster) Do(req *http.Request) (*http.Response, error) {
	req.Header.Set("Authorization", "Bearer "+p.token)
	return http.DefaultClient.Do(req)
}

func briefStages() nlm.Stages {
	return nlm.Stages{
		Query: func(context.Context, lifecycle.NLMRequest, string) (json.RawMessage, error) {
			return json.RawMessage(`{}`), nil
		},
		Structure: func(context.Context, lifecycle.NLMRequest, json.RawMessage) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{Content: json.RawMessage(briefJSON)}, nil
		},
	}
}

// backendWorker is a Worker that runs only the NLM backend, on its own
// store, behind a real server.
func backendWorker(t *testing.T, log *slog.Logger) (*httptest.Server, *storage.Store) {
	t.Helper()
	store := memstore.New()
	proc, err := nlm.New(nlm.Config{Store: store, Owner: "nlm-apart", Logger: log, Client: tokenPoster{"tok-nlm"},
		PollInterval: 20 * time.Millisecond}, briefStages())
	if err != nil {
		t.Fatal(err)
	}
	idle, err := run.NewRunner(run.Config{Store: store, Owner: "idle", Logger: log}, run.Agent{Slug: "idle", Steps: []run.Step{quickStep("noop")}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Runner: idle, NLM: proc, Store: store, Tokens: tokens, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	loop(t, proc.Run)
	return ts, store
}

// loop runs fn until the test ends.
func loop(t *testing.T, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = fn(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestNLMBackendApart: an orchestration Worker and an NLM backend Worker on
// separate stores, joined only by HTTP. A run's step asks the backend
// (POST /jobs/process, 202), parks, is resumed by the backend's callback
// (POST /nlm/callback on the orchestration side), and its next step reads
// the backend's artifact (GET /artifacts/{id}).
func TestNLMBackendApart(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	backendSrv, backendStore := backendWorker(t, log)

	orchStore := memstore.New()
	var orch http.Handler
	orchSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { orch.ServeHTTP(w, r) }))
	t.Cleanup(orchSrv.Close)
	backend := client.NLMBackend{Client: &client.Client{BaseURL: backendSrv.URL, Token: "tok-orch"}, Callback: orchSrv.URL + "/nlm/callback"}
	steps := nlm.Ask(backend, "brief", func(_ context.Context, in run.StepInput) (lifecycle.NLMRequest, error) {
		return lifecycle.NLMRequest{JobType: lifecycle.JobBrief, Query: "brief on " + string(in.Input)}, nil
	})
	r, err := run.NewRunner(run.Config{Store: orchStore, Owner: "orch", Logger: log, PollInterval: 20 * time.Millisecond},
		run.Agent{Slug: "researcher", Machine: lifecycle.MachineApproval, Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Runner: r, NLMBackend: backend, Store: orchStore, Tokens: tokens, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	orch = srv
	loop(t, r.Run)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "researcher", Input: json.RawMessage(`"violin"`)})
	if err != nil {
		t.Fatal(err)
	}
	// Wait answers at the park too: wait on until the run ends.
	st, err := r.Wait(ctx, res.RunID)
	for err == nil && st.FinishedAt == nil {
		time.Sleep(10 * time.Millisecond)
		st, err = r.Wait(ctx, res.RunID)
	}
	if err != nil || st.Status != "completed" {
		msg := ""
		if st.Error != nil {
			msg = *st.Error
		}
		t.Fatalf("run ended %s (%s), %v; want completed", st.Status, msg, err)
	}
	steps2, err := r.Steps(ctx, res.RunID)
	if err != nil || len(steps2) != 2 {
		t.Fatalf("steps %+v, %v", steps2, err)
	}
	var got nlm.Result
	if err := json.Unmarshal(steps2[1].Output, &got); err != nil {
		t.Fatal(err)
	}
	var want, have any
	_ = json.Unmarshal([]byte(briefJSON), &want)
	_ = json.Unmarshal(got.Content, &have)
	if got.JobID == "" || got.ArtifactID == "" || !jsonEqual(want, have) {
		t.Fatalf("result %+v, want the backend's brief", got)
	}
	// Apart: the job and its artifact live in the backend's store only.
	job, err := backend.Get(ctx, got.JobID)
	if err != nil || job.Status != lifecycle.NLMDone || job.Request.RunID != res.RunID {
		t.Fatalf("backend's job %+v, %v", job, err)
	}
	for _, s := range []struct {
		store *storage.Store
		want  bool
	}{{backendStore, true}, {orchStore, false}} {
		_, _, err := s.store.Get(ctx, "nlm/jobs/"+got.JobID+".json")
		if (err == nil) != s.want {
			t.Errorf("nlm job in store (want %v): %v", s.want, err)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestBackendRoutes: who may ask, what each answer is, and the artifact
// reads the matrix grants (a job's result included).
func TestBackendRoutes(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	req := lifecycle.NLMRequest{JobID: "nlm-r1", JobType: lifecycle.JobBrief, AgentSlug: "briefs", Query: "q",
		Callback: "http://127.0.0.1:1/nlm/callback"}
	orch := client.NLMBackend{Client: g.client(lifecycle.ActorOrchestration)}

	job, err := orch.Accept(ctx, req)
	if err != nil || job.JobID != "nlm-r1" || job.Status != lifecycle.NLMAccepted {
		t.Fatalf("Accept = %+v, %v", job, err)
	}
	again, err := orch.Accept(ctx, req)
	if err != nil || again.JobID != job.JobID || again.CreatedAt != job.CreatedAt {
		t.Fatalf("Accept again = %+v, %v; want the job as it stands", again, err)
	}
	bad := req
	bad.JobID, bad.Callback = "nlm-r2", "ftp://x"
	if _, err := orch.Accept(ctx, bad); !errorsIs(err, lifecycle.ErrInvalidJob) {
		t.Fatalf("Accept of a bad callback: %v, want ErrInvalidJob", err)
	}
	if _, err := orch.Get(ctx, "nlm-r2"); !errorsIs(err, lifecycle.ErrNotFound) {
		t.Fatalf("the refused job was written: %v", err)
	}
	got, err := client.NLMBackend{Client: g.client(lifecycle.ActorNLMBackend)}.Get(ctx, "nlm-r1")
	if err != nil || got.JobID != "nlm-r1" {
		t.Fatalf("Get as the backend = %+v, %v", got, err)
	}
	// Only the orchestration layer and the admin ask; nobody else reads.
	for _, a := range []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorFrontend, lifecycle.ActorNLMBackend, lifecycle.ActorSystem} {
		_, err := client.NLMBackend{Client: g.client(a)}.Accept(ctx, req)
		apiError(t, err, http.StatusForbidden, codes.Forbidden)
	}
	_, err = client.NLMBackend{Client: g.client(lifecycle.ActorFrontend)}.Get(ctx, "nlm-r1")
	apiError(t, err, http.StatusForbidden, codes.Forbidden)
	// A raw body with an unknown field is refused as every body is.
	resp := rawPost(t, g, "tok-orch", "/jobs/process", `{"job_id":"nlm-r3","job_type":"BRIEF","agent_slug":"a","callback":"http://x/","bogus":1}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown field: %d", resp.StatusCode)
	}

	// A job's result: a BRIEF job run by the queue to COMPLETE.
	enq, err := g.queue.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: "brief-1", JobType: lifecycle.JobBrief, AgentSlug: "briefs"})
	if err != nil {
		t.Fatal(err)
	}
	op := client.Operator{Client: g.client(lifecycle.ActorFrontend)}
	_, err = op.JobArtifact(ctx, enq.JobID)
	apiError(t, err, http.StatusNotFound, codes.NotFound) // not run yet
	cl, err := g.queue.Claim(ctx, "worker-1")
	if err != nil || cl == nil {
		t.Fatalf("Claim = %v, %v", cl, err)
	}
	done, err := cl.Run(ctx, jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: json.RawMessage(briefJSON)}, nil
	}})
	if err != nil || done.Status != lifecycle.JobComplete || done.JobID != enq.JobID {
		t.Fatalf("Run = %+v, %v", done, err)
	}
	art, err := op.JobArtifact(ctx, enq.JobID)
	if err != nil || art.JobID != enq.JobID || !art.Finalized {
		t.Fatalf("JobArtifact = %+v, %v", art, err)
	}
	byID, err := op.Artifact(ctx, art.ProjectID, art.ArtifactID)
	if err != nil || byID.ArtifactID != art.ArtifactID {
		t.Fatalf("Artifact = %+v, %v", byID, err)
	}
	_, err = op.Artifact(ctx, "", "art-none")
	apiError(t, err, http.StatusNotFound, codes.NotFound)
	_, err = op.Artifact(ctx, "../x", art.ArtifactID)
	apiError(t, err, http.StatusBadRequest, codes.InvalidInput)
	// The artifact table: each reader reads; system has no row.
	for _, a := range []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorOrchestration, lifecycle.ActorNLMBackend, lifecycle.ActorAdmin} {
		if _, err := (client.Operator{Client: g.client(a)}).Artifact(ctx, art.ProjectID, art.ArtifactID); err != nil {
			t.Errorf("%s reads the artifact: %v", a, err)
		}
	}
	_, err = client.Operator{Client: g.client(lifecycle.ActorSystem)}.Artifact(ctx, art.ProjectID, art.ArtifactID)
	apiError(t, err, http.StatusForbidden, codes.Forbidden)
}

func rawPost(t *testing.T, g *rig, token, path, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
