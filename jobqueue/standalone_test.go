package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

const greetType lifecycle.JobType = "GREET"

// greeter is a Typed handler of Greet; fail, if set, is its error.
func greeter(fail error) jobqueue.Handler {
	return jobqueue.Typed(func(ctx context.Context, g Greet) (map[string]string, error) {
		if fail != nil {
			return nil, fail
		}
		return map[string]string{"greeting": "hello, " + g.Name}, nil
	})
}

// withGreet registers GREET with h.
func withGreet(h jobqueue.Handler) func(*jobqueue.Config) {
	return func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{greetType: {Handler: h}}
	}
}

// TestStandaloneJob: a job of a user type with only a type and a payload
// (no run, no agent) runs in its type's lane with a Typed handler given no
// Handlers at all; its artifact reads with the job's own (empty) project.
func TestStandaloneJob(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		q := newQueue(t, s, clock.NewFake(t0), withGreet(greeter(nil)))
		job, err := q.Insert(ctx, greetType, Greet{Name: "Ada"})
		if err != nil {
			t.Fatal(err)
		}
		if job.RunID != "" || job.AgentSlug != jobqueue.TypeLane(greetType) || job.AgentSlug != "_type.GREET" || job.Status != lifecycle.JobQueued || string(job.Payload) != `{"name":"Ada"}` {
			t.Fatalf("enqueued %+v", job)
		}
		done, err := claim(t, q, "w1").Run(ctx, nil)
		if err != nil || done.Status != lifecycle.JobComplete {
			t.Fatalf("ran to %s, %v", done.Status, err)
		}
		res, err := q.Result(ctx, job.JobID)
		if err != nil || string(res.Content) != `{"greeting":"hello, Ada"}` || res.Type != "GREET" || res.AgentSlug != "_type.GREET" || res.RunID != "" {
			t.Fatalf("result %+v, %v", res, err)
		}
		// The job's own project_id is empty: the queue's artifact store reads
		// it as Config.Project, where the artifact went.
		art, err := q.Artifacts().GetForJob(ctx, lifecycle.ActorAdmin, done.ProjectID, job.JobID)
		if err != nil || art.ArtifactID != res.ArtifactID || art.ProjectID != lifecycle.DefaultProject {
			t.Fatalf("GetForJob with the job's project_id %q: %+v, %v", done.ProjectID, art, err)
		}
	})
}

// TestTypedPayload: a payload that does not decode into the Typed
// handler's Args sends the job to DEAD at once with a *PayloadError's
// text; the handler itself returns one matching errors.As.
func TestTypedPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		payload  string
		fail     error
		want     lifecycle.JobState
		wantCode string
		wantErr  string
	}{
		{"decodes", `{"name":"Ada"}`, nil, lifecycle.JobComplete, "", ""},
		{"no payload", ``, nil, lifecycle.JobComplete, "", ""},
		{"wrong type", `{"name":5}`, nil, lifecycle.JobDead, codes.JobPermanent, "does not decode into jobqueue_test.Greet"},
		{"not an object", `[1]`, nil, lifecycle.JobDead, codes.JobPermanent, "payload of job job-t (GREET)"},
		{"handler error retried", `{"name":"Ada"}`, errors.New("upstream down"), lifecycle.JobRetryBackoff, codes.JobHandlerError, "upstream down"},
		{"status error", `{"name":"Ada"}`, &jobqueue.StatusError{Code: 503}, lifecycle.JobRetryBackoff, codes.JobUnavailable, "HTTP 503"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q := newQueue(t, memstore.New(), clock.NewFake(t0), withGreet(greeter(tt.fail)))
			if _, err := q.InsertJob(ctx, jobqueue.NewJob{JobID: "job-t", JobType: greetType, Payload: json.RawMessage(tt.payload)}); err != nil {
				t.Fatal(err)
			}
			j, err := claim(t, q, "w1").Run(ctx, nil)
			if err != nil || j.Status != tt.want || j.ErrorCode != tt.wantCode {
				t.Fatalf("ran to %s code %q, %v; want %s %q", j.Status, j.ErrorCode, err, tt.want, tt.wantCode)
			}
			if msg := ""; j.Error != nil {
				msg = *j.Error
				if !strings.Contains(msg, tt.wantErr) {
					t.Fatalf("error %q, want %q in it", msg, tt.wantErr)
				}
			} else if tt.wantErr != "" {
				t.Fatalf("no error, want %q", tt.wantErr)
			}
		})
	}
	_, err := greeter(nil).Work(context.Background(), lifecycle.Job{JobID: "j", JobType: greetType, Payload: json.RawMessage(`"x"`)})
	var pe *jobqueue.PayloadError
	if !errors.As(err, &pe) || pe.JobID != "j" || pe.Type != "jobqueue_test.Greet" {
		t.Fatalf("Work: %v, want a *PayloadError", err)
	}
}

// TestTypeLanes: jobs without an agent of a type capped at one across
// processes run one at a time, like an agent's; another type's lane, or an
// agent's, runs beside them.
func TestTypeLanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := newQueue(t, memstore.New(), clock.NewFake(t0), func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{greetType: {Handler: greeter(nil), MaxRunningGlobal: 1}, "OTHER": {Handler: greeter(nil)}}
	})
	for _, n := range []jobqueue.NewJob{
		{JobID: "g1", JobType: greetType}, {JobID: "g2", JobType: greetType},
		{JobID: "o1", JobType: "OTHER"}, {JobID: "a1", JobType: greetType, AgentSlug: "agent-a"},
	} {
		if _, err := q.InsertJob(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	held := map[string]bool{}
	for range 4 {
		c, err := q.Claim(ctx, "w1")
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			break
		}
		held[c.Job().JobID] = true
	}
	if len(held) != 3 || !held["g1"] || !held["o1"] || !held["a1"] {
		t.Fatalf("claimed %v, want g1, o1 and a1 (g2 waits for g1's lane)", held)
	}
}

// TestEnqueueLaneRules: an agent_slug in the reserved prefix is refused,
// and so is a job type too long to name its lane when no agent is given;
// with an agent, the same type is fine.
func TestEnqueueLaneRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	long := lifecycle.JobType(strings.Repeat("T", storekey.MaxIDLen-len(jobqueue.TypeLanePrefix)+1))
	s := memstore.New()
	q := newQueue(t, s, clock.NewFake(t0), func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{long: {Handler: greeter(nil)}, greetType: {Handler: greeter(nil)}}
	})
	for _, n := range []jobqueue.NewJob{
		{JobType: long},
		{JobType: greetType, AgentSlug: "_type.OTHER"},
		{JobType: greetType, AgentSlug: "_type."},
	} {
		if _, err := q.InsertJob(ctx, n); !errors.Is(err, lifecycle.ErrInvalidJob) {
			t.Fatalf("%+v: %v, want ErrInvalidJob", n, err)
		}
	}
	if n := countKeys(t, s, ""); n != 0 {
		t.Fatalf("refused jobs wrote %d keys", n)
	}
	if _, err := q.InsertJob(ctx, jobqueue.NewJob{JobType: long, AgentSlug: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Insert(ctx, greetType, func() {}); !errors.Is(err, lifecycle.ErrInvalidJob) {
		t.Fatalf("a payload that does not encode: %v, want ErrInvalidJob", err)
	}
}

// TestSystemCalls: the calls without an actor act as the system (the
// orchestration layer; Retry as the admin), while the same calls with an
// actor still hold the authority matrix.
func TestSystemCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := newQueue(t, memstore.New(), clock.NewFake(t0), withGreet(greeter(jobqueue.Permanent(errors.New("no")))))
	job, err := q.Insert(ctx, greetType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := q.Job(ctx, job.JobID); err != nil || got.JobID != job.JobID {
		t.Fatalf("Job: %+v, %v", got, err)
	}
	if _, err := q.Result(ctx, job.JobID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Result before it ran: %v, want ErrNotFound", err)
	}
	if j, _ := claim(t, q, "w1").Run(ctx, nil); j.Status != lifecycle.JobDead {
		t.Fatalf("ran to %s", j.Status)
	}
	for _, call := range []func() error{
		func() error { _, err := q.Enqueue(ctx, "", jobqueue.NewJob{JobType: greetType}); return err },
		func() error { _, err := q.Get(ctx, "", job.JobID); return err },
		func() error { _, err := q.Requeue(ctx, lifecycle.ActorOrchestration, job.JobID); return err },
		func() error {
			_, err := q.Enqueue(ctx, lifecycle.ActorFrontend, jobqueue.NewJob{JobType: greetType})
			return err
		},
	} {
		if err := call(); !errors.Is(err, lifecycle.ErrForbiddenActor) {
			t.Fatalf("%v, want FORBIDDEN", err)
		}
	}
	if j, err := q.Retry(ctx, job.JobID); err != nil || j.Status != lifecycle.JobQueued || j.Attempt != 0 {
		t.Fatalf("Retry: %s attempt %d, %v", j.Status, j.Attempt, err)
	}
}

// TestHandlersWork: the NLM pipeline's Handlers is a Handler: Work
// assembles the context and passes it to CallNotebookLM; without
// CallNotebookLM it fails for good, and a step's error comes back as is.
func TestHandlersWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("memory backend down")
	echo := func(_ context.Context, _ lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: snap}, nil
	}
	tests := []struct {
		name      string
		h         jobqueue.Handlers
		want      string
		wantErr   error
		permanent bool
	}{
		{"both steps", jobqueue.Handlers{AssembleContext: func(context.Context, lifecycle.Job) (json.RawMessage, error) {
			return json.RawMessage(`{"snapshot":1}`), nil
		}, CallNotebookLM: echo}, `{"snapshot":1}`, nil, false},
		{"no assembly", jobqueue.Handlers{CallNotebookLM: echo}, ``, nil, false},
		{"assembly fails", jobqueue.Handlers{AssembleContext: func(context.Context, lifecycle.Job) (json.RawMessage, error) {
			return nil, boom
		}, CallNotebookLM: echo}, ``, boom, false},
		{"no call", jobqueue.Handlers{}, ``, nil, true},
	}
	for _, tt := range tests {
		var h jobqueue.Handler = tt.h
		out, err := h.Work(ctx, lifecycle.Job{JobID: "j"})
		switch {
		case tt.permanent:
			if err == nil || !strings.HasPrefix(err.Error(), "permanent: ") {
				t.Errorf("%s: %v, want a permanent error", tt.name, err)
			}
		case !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil):
			t.Errorf("%s: %v, want %v", tt.name, err, tt.wantErr)
		case string(out.Content) != tt.want:
			t.Errorf("%s: content %s, want %s", tt.name, out.Content, tt.want)
		}
	}
}
