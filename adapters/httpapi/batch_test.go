package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// batchJSON is a POST /jobs/batch body of n jobs job-000... of agent a,
// with edit applied to each job's fields first.
func batchJSON(n int, edit func(i int, j map[string]any)) string {
	jobs := make([]map[string]any, n)
	for i := range jobs {
		jobs[i] = map[string]any{"job_id": fmt.Sprintf("job-%03d", i), "job_type": "BRIEF", "agent_slug": "a"}
		if edit != nil {
			edit(i, jobs[i])
		}
	}
	b, _ := json.Marshal(map[string]any{"jobs": jobs})
	return string(b)
}

// batchAnswer is POST /jobs/batch's answer, either kind.
type batchAnswer struct {
	Jobs   []lifecycle.Job `json:"jobs"`
	Code   string          `json:"code"`
	Index  *int            `json:"index"`
	Landed []lifecycle.Job `json:"landed"`
}

// TestBatchRoute attacks POST /jobs/batch on a store that commits: every
// refusal writes nothing and says why (naming the job at fault), a body
// past one job's bound but within the batch's passes, and a batch sent
// twice creates its jobs once.
func TestBatchRoute(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	big := strings.Repeat("x", 600<<10)
	tests := []struct {
		name, token, body string
		status            int
		code              string
		index             int // -1: the answer names no job
	}{
		{"no jobs field", "tok-gateway", `{}`, 400, codes.InvalidRequest, -1},
		{"empty list", "tok-gateway", `{"jobs":[]}`, 400, codes.InvalidRequest, -1},
		{"not a list", "tok-gateway", `{"jobs":{}}`, 400, codes.InvalidRequest, -1},
		{"unknown field in a job", "tok-gateway", batchJSON(2, func(i int, j map[string]any) { j["bogus"] = i }), 400, codes.InvalidRequest, -1},
		{"over the cap", "tok-gateway", batchJSON(10001, nil), 413, codes.InputTooLarge, -1},
		{"a job without a type", "tok-gateway", batchJSON(3, func(i int, j map[string]any) {
			if i == 1 {
				delete(j, "job_type")
			}
		}), 400, codes.InvalidRequest, 1},
		{"a bad job id", "tok-gateway", batchJSON(3, func(i int, j map[string]any) {
			if i == 2 {
				j["job_id"] = "../x"
			}
		}), 400, codes.InvalidInput, 2},
		{"an invalid job", "tok-gateway", batchJSON(4, func(i int, j map[string]any) {
			if i == 3 {
				j["max_attempts"] = 101
			}
		}), 400, codes.InvalidRequest, 3},
		{"an id twice", "tok-gateway", batchJSON(4, func(i int, j map[string]any) {
			if i == 2 {
				j["job_id"] = "job-000"
			}
		}), 400, codes.InvalidRequest, 2},
		{"a body over 8 MiB", "tok-gateway", batchJSON(15, func(_ int, j map[string]any) { j["payload"] = map[string]string{"t": big} }), 413, codes.InputTooLarge, -1},
		{"an actor who may not", "tok-frontend", batchJSON(2, nil), 403, codes.Forbidden, -1},
	}
	for _, tt := range tests {
		before := g.snapshot()
		status, _, body := g.raw("POST", "/jobs/batch", tt.token, "application/json", []byte(tt.body), nil)
		var a batchAnswer
		if err := json.Unmarshal(body, &a); err != nil || status != tt.status || a.Code != tt.code {
			t.Fatalf("%s: %d %.300s; want %d %s", tt.name, status, body, tt.status, tt.code)
		}
		switch {
		case tt.index < 0 && a.Index != nil:
			t.Errorf("%s: the answer names job %d: %s", tt.name, *a.Index, body)
		case tt.index >= 0 && (a.Index == nil || *a.Index != tt.index || a.Landed == nil || len(a.Landed) != 0):
			t.Errorf("%s: %s; want index %d and landed []", tt.name, body, tt.index)
		}
		if d := diffSnapshots(before, g.snapshot()); d != "" {
			t.Errorf("%s wrote:\n%s", tt.name, d)
		}
	}

	// 1.8 MiB of three jobs: past one request's 1 MiB, within a batch's.
	ok := batchJSON(3, func(_ int, j map[string]any) { j["payload"] = map[string]string{"t": big} })
	status, _, body := g.raw("POST", "/jobs/batch", "tok-gateway", "application/json", []byte(ok), nil)
	var a batchAnswer
	if err := json.Unmarshal(body, &a); err != nil || status != http.StatusCreated || len(a.Jobs) != 3 || a.Jobs[2].Status != lifecycle.JobQueued {
		t.Fatalf("a batch of 3: %d %.300s", status, body)
	}
	// The same batch again: JOB_EXISTS at its first job, nothing written.
	before := g.snapshot()
	status, _, body = g.raw("POST", "/jobs/batch", "tok-gateway", "application/json", []byte(ok), nil)
	a = batchAnswer{}
	if err := json.Unmarshal(body, &a); err != nil || status != http.StatusConflict || a.Code != codes.JobExists || a.Index == nil || *a.Index != 0 || len(a.Landed) != 0 {
		t.Fatalf("the batch replayed: %d %.300s; want 409 JOB_EXISTS at job 0, none landed", status, body)
	}
	if d := diffSnapshots(before, g.snapshot()); d != "" {
		t.Errorf("the replay wrote:\n%s", d)
	}
	// GET /jobs/batch is the job "batch"; another method is refused.
	for method, want := range map[string]string{"GET": codes.JobNotFound, "PUT": codes.MethodNotAllowed} {
		_, _, body := g.raw(method, "/jobs/batch", "tok-gateway", "", nil, nil)
		if a := (batchAnswer{}); json.Unmarshal(body, &a) != nil || a.Code != want {
			t.Errorf("%s /jobs/batch: %.200s; want %s", method, body, want)
		}
	}
}

// TestBatchRouteOneByOne: on a store that cannot commit several writes
// (filestore) a batch stops at its first failure, and the answer says
// which jobs landed: those before the job it names.
func TestBatchRouteOneByOne(t *testing.T) {
	t.Parallel()
	s, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g := newRig(t, rigOpts{store: s})
	ctx := context.Background()
	gw := g.client(lifecycle.ActorGateway)
	if _, err := gw.Enqueue(ctx, lifecycle.NewJob{JobID: "job-002", JobType: lifecycle.JobBrief, AgentSlug: "a"}); err != nil {
		t.Fatal(err)
	}
	status, _, body := g.raw("POST", "/jobs/batch", "tok-gateway", "application/json", []byte(batchJSON(5, nil)), nil)
	var a batchAnswer
	if err := json.Unmarshal(body, &a); err != nil || status != http.StatusConflict || a.Code != codes.JobExists || a.Index == nil || *a.Index != 2 ||
		len(a.Landed) != 2 || a.Landed[1].JobID != "job-001" {
		t.Fatalf("a batch over job-002: %d %.400s; want 409 JOB_EXISTS at job 2, job-000 and job-001 landed", status, body)
	}
	if _, err := gw.Job(ctx, "job-003"); !errors.Is(err, lifecycle.ErrNotFound) {
		t.Fatalf("job-003, after the failure: %v; want not found", err)
	}

	// The client reports the same: the landed jobs and a *BatchError.
	jobs := []lifecycle.NewJob{{JobID: "job-010", JobType: lifecycle.JobBrief, AgentSlug: "a"}, {JobID: "job-001", JobType: lifecycle.JobBrief, AgentSlug: "a"}}
	landed, err := gw.EnqueueMany(ctx, jobs)
	be, ok := errors.AsType[*lifecycle.BatchError](err)
	if !ok || be.Index != 1 || !errors.Is(err, lifecycle.ErrJobExists) || len(landed) != 1 || landed[0].JobID != "job-010" {
		t.Fatalf("EnqueueMany over job-001 = %v, %v; want job-010 landed and a *BatchError naming job 1", landed, err)
	}
	apiError(t, be.Err, http.StatusConflict, codes.JobExists)
}

// TestClientEnqueueMany: the client's batch against the real server, on a
// store that commits: all created, in order; sent again, refused at its
// first job with nothing landed; a refusal of the whole batch is a plain
// *client.Error.
func TestClientEnqueueMany(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	gw := g.client(lifecycle.ActorGateway)
	jobs := []lifecycle.NewJob{
		{JobID: "job-1", JobType: lifecycle.JobBrief, AgentSlug: "a", Payload: json.RawMessage(`{"topic":"violins"}`)},
		{JobID: "job-2", JobType: lifecycle.JobResearch},
	}
	got, err := gw.EnqueueMany(ctx, jobs)
	if err != nil || len(got) != 2 || got[0].JobID != "job-1" || got[1].AgentSlug != "_type.RESEARCH" || got[1].Status != lifecycle.JobQueued {
		t.Fatalf("EnqueueMany = %+v, %v", got, err)
	}
	if j, err := gw.Job(ctx, "job-2"); err != nil || j.JobType != lifecycle.JobResearch {
		t.Fatalf("job-2 = %+v, %v", j, err)
	}
	before := g.snapshot()
	got, err = gw.EnqueueMany(ctx, jobs)
	be, ok := errors.AsType[*lifecycle.BatchError](err)
	if !ok || be.Index != 0 || !errors.Is(err, lifecycle.ErrJobExists) || len(got) != 0 {
		t.Fatalf("EnqueueMany again = %v, %v; want a *BatchError naming job 0, JOB_EXISTS, none landed", got, err)
	}
	if d := diffSnapshots(before, g.snapshot()); d != "" {
		t.Errorf("the replay wrote:\n%s", d)
	}
	_, err = g.client(lifecycle.ActorFrontend).EnqueueMany(ctx, jobs)
	if _, isBatch := errors.AsType[*lifecycle.BatchError](err); isBatch {
		t.Fatalf("a refused actor's batch = %v; want a plain error", err)
	}
	apiError(t, err, http.StatusForbidden, codes.Forbidden)
}

// TestBatchRouteThousand: POST /jobs/batch takes 1,000 jobs on a store
// that commits (500 a commit); when the second commit fails at a job that
// exists, the answer names it and lists the first 500 as landed, the rest
// absent, and the Go client reports the same as a *BatchError.
func TestBatchRouteThousand(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	gw := g.client(lifecycle.ActorGateway)
	status, _, body := g.raw("POST", "/jobs/batch", "tok-gateway", "application/json", []byte(batchJSON(1000, nil)), nil)
	var a batchAnswer
	if err := json.Unmarshal(body, &a); err != nil || status != http.StatusCreated || len(a.Jobs) != 1000 || a.Jobs[999].JobID != "job-999" {
		t.Fatalf("a batch of 1,000: %d %.300s", status, body)
	}

	more := batchJSON(1000, func(i int, j map[string]any) { j["job_id"] = fmt.Sprintf("more-%04d", i) })
	if _, err := gw.Enqueue(ctx, lifecycle.NewJob{JobID: "more-0700", JobType: lifecycle.JobBrief, AgentSlug: "b"}); err != nil {
		t.Fatal(err)
	}
	status, _, body = g.raw("POST", "/jobs/batch", "tok-gateway", "application/json", []byte(more), nil)
	a = batchAnswer{}
	if err := json.Unmarshal(body, &a); err != nil || status != http.StatusConflict || a.Code != codes.JobExists || a.Index == nil || *a.Index != 700 ||
		len(a.Landed) != 500 || a.Landed[499].JobID != "more-0499" {
		t.Fatalf("1,000 over more-0700: %d %.300s; want 409 JOB_EXISTS at job 700, the first 500 landed", status, body)
	}
	for id, want := range map[string]error{"more-0499": nil, "more-0500": lifecycle.ErrNotFound, "more-0999": lifecycle.ErrNotFound} {
		if _, err := gw.Job(ctx, id); !errors.Is(err, want) {
			t.Fatalf("%s after the failure: %v; want %v", id, err, want)
		}
	}

	jobs := make([]lifecycle.NewJob, 1000)
	for i := range jobs {
		jobs[i] = lifecycle.NewJob{JobID: fmt.Sprintf("last-%04d", i), JobType: lifecycle.JobBrief, AgentSlug: "a"}
	}
	jobs[900].JobID = "more-0000"
	landed, err := gw.EnqueueMany(ctx, jobs)
	be, ok := errors.AsType[*lifecycle.BatchError](err)
	if !ok || be.Index != 900 || be.Landed != 500 || len(landed) != 500 || landed[499].JobID != "last-0499" || !errors.Is(err, lifecycle.ErrJobExists) {
		t.Fatalf("the client's 1,000 over more-0000 = %d landed, %v; want 500 and a *BatchError at 900, Landed 500", len(landed), err)
	}
}
