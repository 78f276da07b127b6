package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

const summaryType lifecycle.JobType = "SUMMARY"

// summaryContent is the content check of the user type SUMMARY: an
// object with a non-empty "text".
func summaryContent(raw json.RawMessage) error {
	var c struct{ Text string }
	if err := json.Unmarshal(raw, &c); err != nil || c.Text == "" {
		return errors.New(`needs a non-empty "text"`)
	}
	return nil
}

func answer(content string, err error) jobqueue.Handlers {
	return jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: json.RawMessage(content)}, err
	}}
}

// TestUserJobTypes: a registered type is accepted by Enqueue, runs its own
// handlers (or the Worker's when it has none), and its artifact, of the
// type's name, is checked by its validator; a refusal is retried unless
// it is Permanent.
func TestUserJobTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		own        jobqueue.Handlers // the type's handlers
		given      jobqueue.Handlers // the handlers given to Run
		validate   func(json.RawMessage) error
		wantStatus lifecycle.JobState
		wantCode   string
	}{
		{"own handler", answer(`{"text":"hi"}`, nil), jobqueue.Handlers{}, summaryContent, lifecycle.JobComplete, ""},
		{"the Worker's handler", jobqueue.Handlers{}, answer(`{"text":"hi"}`, nil), summaryContent, lifecycle.JobComplete, ""},
		{"any JSON without a validator", answer(`[1,2]`, nil), jobqueue.Handlers{}, nil, lifecycle.JobComplete, ""},
		{"content refused", answer(`{"text":""}`, nil), jobqueue.Handlers{}, summaryContent, lifecycle.JobRetryBackoff, codes.JobArtifactWriteError},
		{"not JSON", answer(`{`, nil), jobqueue.Handlers{}, nil, lifecycle.JobRetryBackoff, codes.JobArtifactWriteError},
		{"content refused for good", answer(`{"text":""}`, nil), jobqueue.Handlers{},
			func(raw json.RawMessage) error { return jobqueue.Permanent(summaryContent(raw)) }, lifecycle.JobDead, codes.JobPermanent},
		{"handler fails for good", answer(``, jobqueue.Permanent(errors.New("no such document"))), jobqueue.Handlers{}, nil, lifecycle.JobDead, codes.JobPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := memstore.New()
			q := newQueue(t, s, clock.NewFake(t0), func(c *jobqueue.Config) {
				c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{summaryType: {Handler: tt.own, Validate: tt.validate}}
			})
			n := spec("job-s", "agent-s")
			n.JobType = summaryType
			if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, n); err != nil {
				t.Fatal(err)
			}
			j, err := claim(t, q, "w1").Run(ctx, tt.given)
			if err != nil || j.Status != tt.wantStatus || j.ErrorCode != tt.wantCode || j.Attempt != 1 {
				t.Fatalf("ran to %s code %q attempt %d, %v; want %s %q", j.Status, j.ErrorCode, j.Attempt, err, tt.wantStatus, tt.wantCode)
			}
			a, err := q.Artifacts().GetForJob(ctx, lifecycle.ActorAdmin, lifecycle.DefaultProject, "job-s")
			switch {
			case tt.wantStatus == lifecycle.JobComplete && (err != nil || a.Type != artifact.Type(summaryType)):
				t.Fatalf("artifact %+v, %v; want one of type SUMMARY", a, err)
			case tt.wantStatus != lifecycle.JobComplete && !errors.Is(err, storage.ErrNotFound):
				t.Fatalf("a %s job has an artifact (%v)", tt.wantStatus, err)
			}
			if st := replay(t, s, t0); st["job-s"] != tt.wantStatus {
				t.Fatalf("audit replays to %s", st["job-s"])
			}
		})
	}
}

func TestUserJobTypesRefused(t *testing.T) {
	t.Parallel()
	for _, typ := range []lifecycle.JobType{lifecycle.JobBrief, "", "a/b"} {
		_, err := jobqueue.New(jobqueue.Config{Store: memstore.New(), Types: map[lifecycle.JobType]jobqueue.TypeConfig{typ: {}}})
		if !errors.Is(err, jobqueue.ErrInvalidConfig) {
			t.Errorf("Types naming %q: %v, want ErrInvalidConfig", typ, err)
		}
	}
	q := newQueue(t, memstore.New(), clock.NewFake(t0))
	n := spec("job-1", "agent")
	n.JobType = summaryType
	if _, err := q.Enqueue(context.Background(), lifecycle.ActorGateway, n); !errors.Is(err, lifecycle.ErrInvalidJob) {
		t.Fatalf("unregistered type: %v, want ErrInvalidJob", err)
	}
}

// TestPermanentSkipsRetries: a Permanent error from any step ends the job
// DEAD on its first attempt, through RETRY_BACKOFF and FAILED in the
// audit, with no lane entry left and no artifact.
func TestPermanentSkipsRetries(t *testing.T) {
	t.Parallel()
	boom := errors.New("the document was deleted")
	tests := []struct {
		name string
		step lifecycle.JobState
		h    func(jobqueue.Handlers) jobqueue.Handlers
	}{
		{"context assembly", lifecycle.JobContextAssembly, func(h jobqueue.Handlers) jobqueue.Handlers {
			h.AssembleContext = func(context.Context, lifecycle.Job) (json.RawMessage, error) { return nil, jobqueue.Permanent(boom) }
			return h
		}},
		{"notebooklm call", lifecycle.JobNotebookLMCall, func(h jobqueue.Handlers) jobqueue.Handlers {
			h.CallNotebookLM = func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
				return lifecycle.JobOutput{}, fmt.Errorf("wrapped: %w", jobqueue.Permanent(&jobqueue.StatusError{Code: 404, Err: boom}))
			}
			return h
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			forEachStore(t, func(t *testing.T, s *storage.Store) {
				ctx := context.Background()
				q := newQueue(t, s, clock.NewFake(t0))
				enqueue(t, q, "job-p", "agent-p")
				j, err := claim(t, q, "w1").Run(ctx, tt.h(okHandlers()))
				if err != nil || j.Status != lifecycle.JobDead || j.Attempt != 1 || j.ErrorCode != codes.JobPermanent || j.FailedStep != tt.step {
					t.Fatalf("got %s attempt %d code %q step %s, %v", j.Status, j.Attempt, j.ErrorCode, j.FailedStep, err)
				}
				if j.Error == nil || !errors.Is(jobqueue.Permanent(boom), boom) {
					t.Fatalf("error %v", j.Error)
				}
				if n := countKeys(t, s, layout.LanesPrefix); n != 0 {
					t.Fatalf("%d lane entries left", n)
				}
				if c := claim(t, q, "w1"); c != nil {
					t.Fatalf("a permanent failure was claimed again: %v", c.Job())
				}
				if st := replay(t, s, t0); st["job-p"] != lifecycle.JobDead {
					t.Fatalf("audit replays to %s", st["job-p"])
				}
				// The operator's requeue runs it afresh.
				if r, err := q.Requeue(ctx, lifecycle.ActorAdmin, "job-p"); err != nil || r.Status != lifecycle.JobQueued || r.ErrorCode != "" {
					t.Fatalf("requeue %+v %v", r, err)
				}
			})
		})
	}
	if jobqueue.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) is not nil")
	}
}
